"""The catalogue schema as SQLAlchemy Core tables: the one description Alembic migrates to.

Rules the layout follows (docs/contract.md, Part 2, rules 2, 5 and 6):
- ``tenant_id`` leads every primary and unique key, so the schema can be distributed by tenant.
- URIs are ``text COLLATE "C"``: listing order is byte order and prefix grants become index ranges.
- Blob bytes live in ``blobs`` only; resource rows hold a sha256 reference, so listings never read them.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# Byte-order text: keyset paging and prefix ranges on an ordinary btree index.
UriText = Text(collation="C")


def _timestamp(name: str) -> Column:
    return Column(name, DateTime(timezone=True), nullable=False, server_default=func.now())


tenants = Table(
    "tenants",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("slug", Text, nullable=False),
    Column("name", Text, nullable=False),
    _timestamp("created_at"),
    UniqueConstraint("slug"),
    CheckConstraint("slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'", name="slug_format"),
)

blobs = Table(
    "blobs",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("sha256", Text(collation="C"), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("mime_type", Text, nullable=True),
    Column("data", LargeBinary, nullable=False),
    _timestamp("created_at"),
    PrimaryKeyConstraint("tenant_id", "sha256"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
    CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_hex"),
)

resources = Table(
    "resources",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("uri", UriText, nullable=False),
    Column("name", Text, nullable=False),
    Column("title", Text, nullable=True),
    Column("description", Text, nullable=True),
    Column("mime_type", Text, nullable=True),
    Column("size", BigInteger, nullable=True),
    Column("icons", JSONB, nullable=True),
    Column("annotations", JSONB, nullable=True),
    Column("meta", JSONB, nullable=True),
    Column("tags", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("consent_message", Text, nullable=True),
    # The ``ttlMs`` its reads carry (NULL: the server's CATALOG_READ_TTL_MS), migration 0017.
    Column("ttl_ms", Integer, nullable=True),
    Column("text", Text, nullable=True),
    Column("blob_sha256", Text(collation="C"), nullable=True),
    Column("version", Integer, nullable=False, server_default=text("1")),
    _timestamp("created_at"),
    _timestamp("updated_at"),
    _timestamp("content_changed_at"),
    # The fingerprint of the JSONL line whose import last wrote the row (NULL once another write
    # changed it): a re-import skips that line unparsed (0020, catalog.core.resources.bulk).
    Column("import_line_sha256", LargeBinary, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "uri"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
    ForeignKeyConstraint(["tenant_id", "blob_sha256"], ["blobs.tenant_id", "blobs.sha256"]),
    CheckConstraint("text IS NULL OR blob_sha256 IS NULL", name="one_content"),
    CheckConstraint("ttl_ms >= 0", name="ttl_ms_range"),
    Index("ix_resources_tags", "tags", postgresql_using="gin"),
)

# One row per (resource, tag), kept by a trigger on resources: a tag grant then pages as an ordered
# index range (tenant_id, tag, uri) instead of filtering the whole tenant through the GIN index.
resource_tags = Table(
    "resource_tags",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("tag", Text, nullable=False),
    Column("uri", UriText, nullable=False),
    Column("resource_id", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id", "tag", "uri"),
    ForeignKeyConstraint(
        ["tenant_id", "resource_id"], ["resources.tenant_id", "resources.id"], ondelete="CASCADE"
    ),
    Index("ix_resource_tags_tenant_id_resource_id", "tenant_id", "resource_id"),
)

resource_versions = Table(
    "resource_versions",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("resource_id", BigInteger, nullable=False),
    Column("version", Integer, nullable=False),
    Column("uri", UriText, nullable=False),
    # The resource's metadata as it was at that version (camelCase, as the admin API shows it).
    Column("snapshot", JSONB, nullable=False),
    Column("text", Text, nullable=True),
    Column("blob_sha256", Text(collation="C"), nullable=True),
    Column("changed_by", Text, nullable=False),
    _timestamp("changed_at"),
    PrimaryKeyConstraint("tenant_id", "resource_id", "version"),
    ForeignKeyConstraint(
        ["tenant_id", "resource_id"], ["resources.tenant_id", "resources.id"], ondelete="CASCADE"
    ),
)

templates = Table(
    "templates",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("uri_template", UriText, nullable=False),
    # The literal text before the first expression: what grants by prefix and completion match on.
    Column("literal_prefix", UriText, nullable=False),
    Column("name", Text, nullable=False),
    Column("title", Text, nullable=True),
    Column("description", Text, nullable=True),
    Column("mime_type", Text, nullable=True),
    Column("icons", JSONB, nullable=True),
    Column("annotations", JSONB, nullable=True),
    Column("meta", JSONB, nullable=True),
    Column("tags", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("text", Text, nullable=True),
    Column("version", Integer, nullable=False, server_default=text("1")),
    _timestamp("created_at"),
    _timestamp("updated_at"),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "uri_template"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
    Index("ix_templates_tenant_id_literal_prefix", "tenant_id", "literal_prefix"),
)

grants = Table(
    "grants",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("scope", Text, nullable=False),
    Column("uri", UriText, nullable=True),
    Column("uri_prefix", UriText, nullable=True),
    Column("tag", Text, nullable=True),
    _timestamp("created_at"),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "scope", "uri", "uri_prefix", "tag", postgresql_nulls_not_distinct=True),
    ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
    CheckConstraint("num_nonnulls(uri, uri_prefix, tag) = 1", name="one_selector"),
)

tokens = Table(
    "tokens",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("name", Text, nullable=True),
    # sha256 of the whole token string; the token itself is never stored.
    Column("token_hash", LargeBinary, nullable=False),
    Column("scopes", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("is_admin", Boolean, nullable=False, server_default=text("false")),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    _timestamp("created_at"),
    PrimaryKeyConstraint("tenant_id", "id"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
    # The one key that cannot start with tenant_id: a bearer token is looked up before its tenant
    # is known. On a tenant-distributed cluster this table is a reference table.
    Index("ix_tokens_token_hash", "token_hash", unique=True),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("id", BigInteger, Identity(always=False), nullable=False),
    _timestamp("at"),
    Column("principal", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target_kind", Text, nullable=False),
    Column("target_id", BigInteger, nullable=True),
    Column("uri", UriText, nullable=True),
    Column("before_digest", Text, nullable=True),
    Column("after_digest", Text, nullable=True),
    Column("detail", JSONB, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
    # No foreign key to tenants (0020): a statement-level trigger checks each insert's tenants once,
    # and a tenant's delete removes its rows (catalog/db/sql/functions.sql).
)

# Written by triggers (see migrations), so a change made from any SQL session is in the feed too.
# ``seq`` numbers each tenant's changes from a sequence of its own (migration 0004), given at
# commit under a per-tenant lock (migration 0011), so the feed grows in commit order; a tenant's
# feed shows no trace of other tenants' activity. ``tags_before`` and ``tags_after`` are the
# changed row's tags (null where it did not exist, or for older rows).
change_feed = Table(
    "change_feed",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", Text, nullable=False),
    Column("uri", UriText, nullable=True),
    Column("op", Text, nullable=False),
    _timestamp("at"),
    Column("tags_before", ARRAY(Text), nullable=True),
    Column("tags_after", ARRAY(Text), nullable=True),
    PrimaryKeyConstraint("tenant_id", "seq"),
    # No foreign key to tenants, as audit_log (0020).
    CheckConstraint("kind IN ('resource', 'template', 'grant')", name="kind"),
    CheckConstraint("op IN ('created', 'updated', 'deleted')", name="op"),
)

# The platform admin's record: tenant creations and deletions, and the audit trail of every deleted
# tenant (copied by a trigger just before the tenant goes). Readable in the platform scope only;
# not tied to ``tenants``, so it outlives them. ``id`` orders it across tenants.
platform_audit_log = Table(
    "platform_audit_log",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("tenant_slug", Text, nullable=False),
    _timestamp("at"),
    Column("principal", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target_kind", Text, nullable=False),
    Column("target_id", BigInteger, nullable=True),
    Column("uri", UriText, nullable=True),
    Column("before_digest", Text, nullable=True),
    Column("after_digest", Text, nullable=True),
    Column("detail", JSONB, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
    Index("ix_platform_audit_log_id", "id"),  # the platform-wide order; not unique: no key without tenant_id
)

TENANT_TABLES = (
    "blobs",
    "resources",
    "resource_tags",
    "resource_versions",
    "templates",
    "grants",
    "tokens",
    "audit_log",
    "change_feed",
    "mcp_sessions",
    "mcp_session_requests",
)

# 2025-11-25 MCP sessions: shared by every worker of every host, so any of them serves any request
# of a session (no sticky routing). The session id itself is never stored, only its sha256.
mcp_sessions = Table(
    "mcp_sessions",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("id_hash", LargeBinary, nullable=False),
    Column("principal", Text, nullable=False),  # the credential that opened it (Principal.identity)
    Column("protocol_version", Text, nullable=False),
    Column("client_params", JSONB, nullable=False),  # the initialize params: capabilities, clientInfo
    Column("subscriptions", JSONB, nullable=False, server_default=text("'{}'::jsonb")),  # sent -> canonical
    _timestamp("created_at"),
    _timestamp("last_seen_at"),
    PrimaryKeyConstraint("tenant_id", "id_hash"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
    Index("ix_mcp_sessions_last_seen_at", "last_seen_at"),
)

# Server-initiated requests of a 2025 session (elicitation) waiting for the client's answer, which
# may arrive at any worker: the answer is stored here and the waiting worker told by NOTIFY.
mcp_session_requests = Table(
    "mcp_session_requests",
    metadata,
    Column("tenant_id", BigInteger, nullable=False),
    Column("session_hash", LargeBinary, nullable=False),
    Column("request_id", Text, nullable=False),
    Column("response", JSONB, nullable=True),
    _timestamp("created_at"),
    PrimaryKeyConstraint("tenant_id", "session_hash", "request_id"),
    ForeignKeyConstraint(
        ["tenant_id", "session_hash"], ["mcp_sessions.tenant_id", "mcp_sessions.id_hash"], ondelete="CASCADE"
    ),
)

# Distributing the schema by tenant on Citus (docs/scaling.md): every table above is distributed by
# ``tenant_id`` -- so each primary key, unique constraint and foreign key includes it -- except
# these, which become reference tables (a copy on every node): rows looked up before any tenant is
# known (a tenant by slug, a token by its hash). ``alembic_version`` stays local to the coordinator.
CITUS_REFERENCE_TABLES = ("tenants", "tokens")
CITUS_LOCAL_TABLES = ("alembic_version", "platform_audit_log")
