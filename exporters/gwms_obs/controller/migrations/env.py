"""Alembic's environment for the controller's database.

Store.migrate runs Alembic with no alembic.ini: it passes an open connection, in a
transaction it owns, as ``config.attributes["connection"]``. A developer writing the
next revision runs Alembic by hand against a scratch database instead::

    cat >/tmp/alembic.ini <<'EOF'
    [alembic]
    script_location = gwms_obs.controller:migrations
    file_template = v%%(rev)s_%%(slug)s
    EOF
    alembic -c /tmp/alembic.ini -x url=sqlite:////tmp/scratch.db upgrade head
    alembic -c /tmp/alembic.ini -x url=sqlite:////tmp/scratch.db revision --autogenerate --rev-id 0002 -m "..."

and reviews what it wrote: a revision is frozen once shipped (never import store.py's tables in one).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from gwms_obs.controller.store import metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite alters a table by copying it: later revisions use op.batch_alter_table
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    if context.is_offline_mode():
        raise SystemExit("the controller's migrations run against a database, not as --sql")
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database: -x url=... or sqlalchemy.url")
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


# Alembic runs this file inside its environment; imported anywhere else (a check that every
# module of the wheel imports) there is nothing to run
if hasattr(context, "config"):
    main()
