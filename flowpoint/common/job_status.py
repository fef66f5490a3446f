"""PyFlink's ``pyflink.common.job_status``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.driver.job_status import JobStatus

__all__ = ["JobStatus"]
