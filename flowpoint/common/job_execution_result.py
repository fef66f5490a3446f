"""PyFlink's ``pyflink.common.job_execution_result``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.driver.job_status import JobExecutionResult

__all__ = ["JobExecutionResult"]
