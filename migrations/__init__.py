"""The alembic history: one for PostgreSQL and DuckDB, written by hand (DuckDB reflection is
too thin for autogenerate). ``migrations.runner`` runs it; ``alembic.ini`` serves the CLI."""
