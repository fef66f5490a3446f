"""PyFlink's ``pyflink.common.job_client``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.driver.job import JobClient

__all__ = ["JobClient"]
