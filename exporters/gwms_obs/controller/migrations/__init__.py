"""The controller's schema migrations (Alembic); run by Store.migrate, see env.py."""
