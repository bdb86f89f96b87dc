"""``python -m app.cli``: the ``topicstore`` command line."""

from app.cli import main

main()
