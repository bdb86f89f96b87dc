"""Seed 000's benchmark tables, run on our engines beside a plain dict-trie baseline.

Entry point: ``bench.suite.run`` (``topicstore bench`` on the command line). This package
imports nothing heavy, so ``python -m bench.memory`` children start quickly.
"""
