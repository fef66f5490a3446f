"""PyFlink's ``pyflink.datastream.async_retry_predicates``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from __future__ import annotations


def empty_result_predicate(result: list | None) -> bool:
    """Retry when the call returned nothing."""
    return result is None or len(result) == 0


def has_exception_predicate(error: BaseException | None) -> bool:
    """Retry when the call raised."""
    return error is not None


def exception_type_predicate(error: BaseException | None, expected_error_type: type) -> bool:
    """Retry when the call raised ``expected_error_type``."""
    return isinstance(error, expected_error_type)


__all__ = ["empty_result_predicate", "exception_type_predicate", "has_exception_predicate"]
