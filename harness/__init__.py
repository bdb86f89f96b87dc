"""What the tests and the benchmark suite both use to drive the real thing: a ``topicstore
serve`` process on a free port (``server``), throwaway PostgreSQL databases
(``scratch_db``), seeded inputs (``workloads``), slow clients (``slow_clients``) and
scripts run by a new interpreter (``fresh``); and what both test trees (``tests/``,
``bench/tests/``) use to reach the real services, or skip (fail on CI) without them
(``services``).

It may import the packages it drives (app, loader, store, migrations, matcher); the tests
and bench import it, and it imports neither of them.
"""
