"""One file per schema revision; Alembic loads them by path (this file only makes them package modules)."""
