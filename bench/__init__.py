"""The benchmark suite: the "Fast Topic Matching" tables, run on our engines beside a plain
dict-trie baseline, and the service's own tables (HTTP load, store, propagation, Spark job).

Entry point: ``bench.suite.run`` (``topicstore bench [TABLE ...]`` on the command line); the
tables are registered by name in ``bench.tables``. This package imports nothing heavy, so
``python -m bench.memory`` children start quickly.
"""
