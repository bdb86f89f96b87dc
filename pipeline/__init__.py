"""The batch side of topicstore: a Spark job that routes a table of messages through our own
matching engines (``pipeline.job``), and DuckDB analytics over the tables it writes
(``pipeline.analytics``, ``pipeline.charts``). Imports ``matcher`` and ``store``, never ``app``.
"""
