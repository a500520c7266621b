"""The SQL that runs is the SQL in the package, and a fast read sends content
only for a row the caller may see.

``catalog/db/sql/functions.sql`` holds the current definition of every function and trigger; the
migrations carry frozen copies. On a freshly migrated database, every function of the schema (not
an extension's) is dropped, with its triggers, the file is run, and ``pg_get_functiondef`` /
``pg_get_triggerdef`` are compared before and after (indentation aside: the migrations wrote their
bodies inside indented Python strings). A function or trigger that only one of them has fails too.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from catalog.core.principal import Principal
from catalog.core.visibility import visibility_of_grants
from catalog.db.definitions import sql_text

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"

# The schema's own functions (an extension's, pg_trgm's, are not the catalog's).
_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid) AS definition,
       coalesce(p.proacl::text, '') AS acl
FROM pg_proc AS p
WHERE p.pronamespace = current_schema()::regnamespace
  AND NOT EXISTS (
      SELECT 1 FROM pg_depend AS d
      WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  )
"""
_TRIGGERS = """
SELECT t.tgrelid::regclass::text || '.' || t.tgname AS name, pg_get_triggerdef(t.oid) AS definition
FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace
"""


def _normalised(definition: str) -> str:
    """``definition`` with each line's surrounding whitespace dropped (indentation is no meaning)."""
    return "\n".join(line.strip() for line in definition.splitlines())


async def _definitions(conn: asyncpg.Connection) -> dict[str, str]:
    found = {
        f"function {row['signature']}": _normalised(row["definition"]) + f"\nacl {row['acl']}"
        for row in await conn.fetch(_FUNCTIONS)
    }
    found.update({f"trigger {row['name']}": row["definition"] for row in await conn.fetch(_TRIGGERS)})
    return found


async def _from_file(conn: asyncpg.Connection, sql: str) -> dict[str, str]:
    """What the database's functions and triggers are once every one is dropped and ``sql`` run
    (inside a transaction rolled back)."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        for row in await conn.fetch(_FUNCTIONS):
            await conn.execute(f"DROP FUNCTION {row['signature']} CASCADE")
        assert await conn.fetch(_TRIGGERS) == [], "a trigger that no catalog function runs"
        await conn.execute(sql)
        return await _definitions(conn)
    finally:
        await transaction.rollback()


def _differences(database: dict[str, str], file: dict[str, str]) -> list[str]:
    return sorted(
        [f"only in the database: {name}" for name in database.keys() - file.keys()]
        + [f"only in the file: {name}" for name in file.keys() - database.keys()]
        + [f"differs: {name}" for name in database.keys() & file.keys() if database[name] != file[name]]
    )


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(make_url(database_url).set(drivername="postgresql").render_as_string(False))
    try:
        yield conn
    finally:
        await conn.close()


async def test_every_function_and_trigger_of_a_migrated_database_is_the_packages(
    db: asyncpg.Connection,
) -> None:
    migrated = await _definitions(db)
    assert sum(name.startswith("function ") for name in migrated) >= 20
    assert sum(name.startswith("trigger ") for name in migrated) >= 10
    assert _differences(migrated, await _from_file(db, sql_text())) == []


async def test_a_function_only_the_database_or_only_the_file_has_is_a_difference(
    db: asyncpg.Connection,
) -> None:
    """The comparison itself: a stray function in the database, or a definition the file lacks,
    is named."""
    await db.execute("CREATE FUNCTION catalog_stray() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$")
    text = sql_text()
    start = text.index("CREATE OR REPLACE FUNCTION catalog_tenant_deleted()")
    end = text.index("$$;", text.index("AS $$", start)) + len("$$;")
    trigger = "CREATE TRIGGER tenants_deleted AFTER DELETE ON tenants\nFOR EACH ROW EXECUTE FUNCTION catalog_tenant_deleted();"
    without = (text[:start] + text[end:]).replace(trigger, "")
    assert _differences(await _definitions(db), await _from_file(db, without)) == [
        "only in the database: function catalog_stray()",
        "only in the database: function catalog_tenant_deleted()",
        "only in the database: trigger tenants.tenants_deleted",
    ]


def test_migrations_read_neither_one_another_nor_the_package() -> None:
    """Each migration is frozen text: it imports only Alembic, SQLAlchemy and typing helpers, and
    opens no file."""
    allowed = {"__future__", "collections.abc", "typing", "alembic", "sqlalchemy", "sqlalchemy.dialects"}
    for script in sorted(VERSIONS.glob("0*.py")):
        tree = ast.parse(script.read_text())
        imported = {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        } | {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert imported <= allowed, (script.name, imported - allowed)
        called = {
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert not called & {"open", "exec", "eval", "__import__"}, script.name


# -- content only for a visible row ---------------------------------------------------------------

BIG = 8 * 1024 * 1024
HIDDEN = "file:///secret/big.bin"
SHOWN = "file:///shared/small.txt"
_READ = "SELECT * FROM catalog_plain_read($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
_RESOURCE_COLUMNS = (
    "resource_uri",
    "resource_mime_type",
    "resource_tags",
    "resource_consent_message",
    "resource_text",
    "resource_blob",
    "resource_has_blob",
)


async def _seeded(db: asyncpg.Connection) -> int:
    """A tenant with an 8 MiB blob under file:///secret/ and a text under file:///shared/, and a
    grant of scope ``reader`` over file:///shared/ only."""
    tenant: int = await db.fetchval("INSERT INTO tenants (slug, name) VALUES ('t', 'T') RETURNING id")
    data = b"\x00" * BIG
    digest = hashlib.sha256(data).hexdigest()
    await db.execute(
        "INSERT INTO blobs (tenant_id, sha256, size, data) VALUES ($1, $2, $3, $4)", tenant, digest, BIG, data
    )
    await db.execute(
        "INSERT INTO resources (tenant_id, uri, name, mime_type, blob_sha256, size)"
        " VALUES ($1, $2, 'big', 'application/octet-stream', $3, $4)",
        tenant,
        HIDDEN,
        digest,
        BIG,
    )
    await db.execute(
        "INSERT INTO resources (tenant_id, uri, name, mime_type, text, size) VALUES ($1, $2, 's', 'text/plain', 'hi', 2)",
        tenant,
        SHOWN,
    )
    await db.execute(
        "INSERT INTO grants (tenant_id, scope, uri_prefix) VALUES ($1, 'reader', 'file:///shared/')", tenant
    )
    return tenant


def _received(row: asyncpg.Record) -> int:
    """The bytes of the row's resource columns (what the driver received for them)."""
    return sum(
        len(value) if isinstance(value, str | bytes) else 0 for value in (row[c] for c in _RESOURCE_COLUMNS)
    )


async def test_a_hidden_large_blob_costs_what_a_missing_uri_costs(db: asyncpg.Connection) -> None:
    """RES-17's "not found" for an invisible resource: the fast read answers a hidden 8 MiB blob
    with exactly the row of a missing URI (no content column values), under the selectors Python
    compiles for the reader; the same statement sends the blob to the tenant's admin."""
    tenant = await _seeded(db)
    reader = Principal(kind="token", tenant_id=tenant, tenant_slug="t", scopes=frozenset({"reader"}))
    visibility = visibility_of_grants(reader, tenant, prefixes=["file:///shared/"])
    selectors = (False, *visibility.page_selectors())
    standing = (None, tenant, ["reader"], False)
    hidden = await db.fetchrow(_READ, *standing, HIDDEN, *selectors)
    missing = await db.fetchrow(_READ, *standing, "file:///secret/none.bin", *selectors)
    shown = await db.fetchrow(_READ, *standing, SHOWN, *selectors)
    assert dict(hidden) == dict(missing)
    assert [hidden[c] for c in _RESOURCE_COLUMNS] == [None] * len(_RESOURCE_COLUMNS)
    assert _received(hidden) == _received(missing) == 0
    assert (shown["resource_uri"], shown["resource_text"]) == (SHOWN, "hi")
    admin = await db.fetchrow(_READ, None, tenant, [], True, HIDDEN, True, None, None, None, None)
    assert _received(admin) >= BIG and admin["resource_blob"] == b"\x00" * BIG


async def test_selectors_the_principal_no_longer_holds_show_nothing(db: asyncpg.Connection) -> None:
    """Selectors remembered from before a grant was revoked (or claimed without one, or
    ``everything`` without being an admin) read no row; without selectors no row is read."""
    tenant = await _seeded(db)
    standing = (None, tenant, ["reader"], False)
    wider = (False, ["file:///"], ["file:///\U0010ffff"], [], [])
    as_admin = (True, None, None, None, None)
    for selectors in (wider, as_admin, (None,) * 5):
        row = await db.fetchrow(_READ, *standing, HIDDEN, *selectors)
        assert row["resource_uri"] is None and row["grant_prefixes"] == ["file:///shared/"], selectors
    await db.execute("DELETE FROM grants WHERE tenant_id = $1", tenant)
    held_before = (False, ["file:///shared/"], ["file:///shared0"], [], [])
    row = await db.fetchrow(_READ, *standing, SHOWN, *held_before)
    assert row["resource_uri"] is None and row["resource_text"] is None


def test_the_sql_definitions_ship_as_package_data() -> None:
    """pyproject's package-data names catalog/db/sql/*.sql, so an installed wheel has the file."""
    assert "CREATE OR REPLACE FUNCTION catalog_plain_read(" in sql_text()


# -- one grant loader ------------------------------------------------------------------------------


def test_one_function_of_the_package_reads_the_grants_table() -> None:
    """Which grants a principal's scopes hold is loaded in one place (``catalog_scope_grants``):
    ``catalog_plain_read`` (so ``catalog_plain_page`` and completion) calls it, and so does
    ``load_visibility``."""
    text = sql_text()
    readers = [
        text.rfind("CREATE OR REPLACE FUNCTION", 0, at.start())
        for at in re.finditer(r"\b(FROM|JOIN)\s+grants\b", text)
    ]
    assert [text[start:].split("(")[0].split()[-1] for start in readers] == ["catalog_scope_grants"]
    plain_read = text[text.index("CREATE OR REPLACE FUNCTION catalog_plain_read(") :]
    assert "FROM catalog_scope_grants(principal_tenant_id, principal_scopes)" in plain_read.split("$$;")[0]


async def test_the_grant_loader_returns_only_grants_the_callers_scope_may_read(
    db: asyncpg.Connection,
) -> None:
    """``catalog_scope_grants`` runs as its caller: under the app role, row-level security shows it
    the grants of the tenant the transaction is scoped to and none of another's; it returns every
    grant of the scopes asked for (the admin flag and the like are Python's rule), NULL arrays for
    none. The prefix grant ``file:///shared/`` brings its directory URI ``file:///shared`` among
    the URIs (0018)."""
    tenant = await _seeded(db)
    other = await db.fetchval("INSERT INTO tenants (slug, name) VALUES ('o', 'O') RETURNING id")
    await db.execute(
        "INSERT INTO grants (tenant_id, scope, tag) VALUES ($1, 'reader', 't'), ($1, 'writer', 'w')", tenant
    )
    loaded = "SELECT uris, prefixes, tags FROM catalog_scope_grants($1, $2)"
    for scope, expected in (
        (tenant, (["file:///shared"], ["file:///shared/"], ["t"])),
        (other, (None, None, None)),
    ):
        async with db.transaction():
            await db.execute("SET LOCAL ROLE catalog_app")
            await db.execute("SELECT set_config('catalog.tenant_id', $1, true)", str(scope))
            assert tuple(await db.fetchrow(loaded, tenant, ["reader", "nothing"])) == expected, scope
    assert tuple(await db.fetchrow(loaded, tenant, [])) == (None, None, None)
    assert sorted((await db.fetchrow(loaded, tenant, ["reader", "writer"]))["tags"]) == ["t", "w"]


async def test_snippets_read_as_much_of_a_text_as_the_full_text_match(db: asyncpg.Connection) -> None:
    """A snippet is cut from the part of a text the match reads: the two limits are one number."""
    from catalog.core.resources.search import SEARCHED_TEXT_CHARS

    definition = await db.fetchval(
        "SELECT pg_get_functiondef('catalog_resource_text_vector(text)'::regprocedure)"
    )
    assert f"left(body, {SEARCHED_TEXT_CHARS})" in definition, definition
