"""The controller's first schema: rules, their audit log, and the change counter.

Revision ID: 0001
Revises:
Create Date: 2026-05-10

Frozen: this is the schema as revision 0001 made it, written out rather than taken
from store.py's tables, which follow the newest revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

KINDS = "'vo', 'site', 'operator', 'cap'"
ROLES = "'operator', 'site_admin', 'vo_manager', 'pilot', 'reader'"
ACTIONS = "'create', 'expire', 'delete', 'denied'"


def upgrade() -> None:
    op.create_table(
        "rules",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("factory", sa.String(256), nullable=True),
        sa.Column("entry", sa.String(256), nullable=True),
        sa.Column("site", sa.String(256), nullable=True),
        sa.Column("frontend", sa.String(256), nullable=True),
        sa.Column("security_class", sa.String(256), nullable=True),
        sa.Column("pilot", sa.String(256), nullable=True),
        sa.Column("verbosity", sa.Integer, nullable=False),
        sa.Column("sample", sa.Double, nullable=False),
        sa.Column("record_commands", sa.Boolean, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created", sa.Double, nullable=False),
        sa.Column("expires", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rules")),
        sa.CheckConstraint(f"kind IN ({KINDS})", name=op.f("ck_rules_kind")),
        sa.CheckConstraint(f"role IN ({ROLES})", name=op.f("ck_rules_role")),
        sa.CheckConstraint("verbosity BETWEEN 0 AND 3", name=op.f("ck_rules_verbosity")),
        sa.CheckConstraint("sample >= 0 AND sample <= 1", name=op.f("ck_rules_sample")),
        # SQLite: never reuse a deleted rule's id (its audit history would pass to the next rule)
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_rules_site"), "rules", ["site"])
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("attempted", sa.String(16), nullable=False),
        sa.Column("rule_id", sa.Integer, nullable=True),  # no foreign key: a deleted rule's history stays
        sa.Column("before_json", sa.Text, nullable=True),
        sa.Column("after_json", sa.Text, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit")),
        sa.CheckConstraint(f"action IN ({ACTIONS})", name=op.f("ck_audit_action")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_audit_rule_id"), "audit", ["rule_id"])
    meta = op.create_table(
        "meta",
        sa.Column("id", sa.Integer, autoincrement=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_meta")),
        sa.CheckConstraint("id = 1", name=op.f("ck_meta_single_row")),
    )
    op.bulk_insert(meta, [{"id": 1, "generation": 0}])


def downgrade() -> None:
    op.drop_table("meta")
    op.drop_index(op.f("ix_audit_rule_id"), table_name="audit")
    op.drop_table("audit")
    op.drop_index(op.f("ix_rules_site"), table_name="rules")
    op.drop_table("rules")
