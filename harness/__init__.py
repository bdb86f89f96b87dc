"""What the tests and the benchmark suite both use to drive the real thing: a ``topicstore
serve`` process on a free port (``server``), throwaway PostgreSQL databases
(``scratch_db``), seeded inputs (``workloads``) and slow clients (``slow_clients``).

It may import the packages it drives (app, loader, store, migrations, matcher); the tests
and bench import it, and it imports neither of them.
"""
