"""The REST API's answers, in the shapes of Flink's REST API (``docs/rest.md``): what
``/jobs/:jid``, ``/jobs/:jid/checkpoints``, ``/jobs/:jid/exceptions``, ... answer, built from a
running job's :class:`~flowpoint.driver.job.JobClient`. Every field Flink's answer has is
there; what flowpoint adds is in a ``"flowpoint"`` object beside them."""
