"""The DataFrame-only adapter, for Spark Connect sessions (``remote(...)``, ``SPARK_REMOTE``,
``spark.api.mode=connect``): no SparkContext, RDD, broadcast variable or accumulator in this
process, so every Spark job is a DataFrame query (docs/deployment.md, "Spark Connect").

- :mod:`frames`: task descriptions and results as rows ``(dest int, edge bigint, blob binary)``
  of Arrow batches: ``dest`` the partition a row goes to (``repartitionById``), ``edge`` the
  job graph edge of a record batch, or a task slice or an acknowledgement; ``blob`` flowpoint's
  own encoding of it;
- :mod:`epoch_launcher`: one epoch as one DataFrame query of ``mapInArrow`` stages;
- :mod:`adapter`: the :class:`~flowpoint.spark.adapter.SparkAdapter` of a Connect session.
"""
