"""PyFlink's ``pyflink.datastream.async_retry_predicates``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.async_io import (
    empty_result_predicate,
    exception_type_predicate,
    has_exception_predicate,
)

__all__ = ["empty_result_predicate", "exception_type_predicate", "has_exception_predicate"]
