"""The topicstore service (FastAPI: admin, match and operations API) and the ``topicstore``
command line, wiring the store, the loader and the matchers together."""
