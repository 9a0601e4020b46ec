"""Web page sessions kept in the database, so a logout ends a session in every worker.

Revision ID: 0002
Revises: 0001
Create Date: 2026-06-01

Frozen: the schema as revision 0002 made it (store.py's tables follow the newest revision).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(64)),  # SHA-256 of the session id
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("created", sa.Double, nullable=False),
        sa.Column("expires", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index(op.f("ix_sessions_expires"), "sessions", ["expires"])


def downgrade() -> None:
    op.drop_index(op.f("ix_sessions_expires"), table_name="sessions")
    op.drop_table("sessions")
