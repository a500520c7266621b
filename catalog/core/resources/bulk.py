"""Set-based upsert of many resources in one transaction (``catalog import`` of a JSONL file).

The same writes as :func:`~catalog.core.resources.writes.upsert_resource` body by body -- the new
or changed row, its version, its audit row; the change-feed rows by the statement-level triggers
(migration 0006) -- done by the database a statement at a time instead of a row at a time:

1. every body is checked here by the service's rules (content limits, a directory has no content)
   and turned into the row it becomes, with the snapshot its version keeps and its audit digest;
2. the rows are COPYed into a temporary staging table (``ON COMMIT DROP``);
3. the staged rows identical to the tenant's current ones are dropped from the staging table (a
   body that changes nothing is no write), so that re-importing a file that changed a little
   writes -- and upserts, locks and checks -- only what changed;
4. the existing rows a body changes are read once (locked, in URI order) for their digests before;
5. the writer's one statement (:func:`catalog.core.resources.writer.apply_sql`, the statement of
   every resource write) upserts every new and changed row by URI, and appends their versions and
   audit rows.

A re-import skips, before step 1, every line byte for byte the one whose import last wrote its URI's
row (:func:`line_fingerprint`, kept in ``resources.import_line_sha256``, cleared by any other write):
the same bytes under the same rules make the same row, which is unchanged. Such a line is
:class:`Known`: neither parsed nor staged, it counts as unchanged.

Into a tenant with no resources yet (a first load, the large case), steps 2 and 5 repeat every
``write_every`` URIs within the transaction, so that the database writes while the caller parses
the lines after them, and steps 3 and 4 are skipped (there is nothing to look up). What that
cannot do right -- a URI again after its first body was written, a row another writer adds
meanwhile -- raises :class:`StartOver` after rolling back, and the caller writes once at the end
instead.

All or nothing: a body that breaks a rule, or names a blob the tenant does not have, fails the
whole import (every such body is reported) and nothing is written. A URI given more than once
counts once, its last body winning (one version, not one per line). A body that changes nothing
is not a write, as everywhere.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import json
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from catalog.core import blobs as blob_store
from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources.record import METADATA_FIELDS, content_digest, snapshot_of
from catalog.core.resources.writer import Key, apply_sql, differs
from catalog.core.resources.writes import check_directory, no_such_blob, text_size
from catalog.core.schemas.base import column_values
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, transaction

STAGING = "catalog_import_staging"
BEFORE = "catalog_import_before"
# The bulk statements run as long as they need: the engine's statement timeout is for requests.
_NO_TIMEOUT = 7 * 24 * 3600.0

# Staging columns, in COPY order: the line's number and fingerprint, a resource's metadata (the
# record's own list), its content, and what the version and the audit entry keep of it.
STAGING_COLUMNS = (
    "line",
    "fingerprint",
    *METADATA_FIELDS,
    "text",
    "blob_sha256",
    "size",
    "snapshot",
    "digest",
)
_URI = STAGING_COLUMNS.index("uri")
_CREATE_STAGING = f"""
CREATE TEMP TABLE {STAGING} (
    line bigint NOT NULL, fingerprint bytea NOT NULL, uri text COLLATE "C" NOT NULL, name text NOT NULL, title text,
    description text, mime_type text, icons jsonb, annotations jsonb, tags text[] NOT NULL,
    consent_message text, ttl_ms integer, meta jsonb, text text, blob_sha256 text COLLATE "C", size bigint,
    snapshot jsonb NOT NULL, digest text NOT NULL
) ON COMMIT DROP
"""
# The statements join the staging table to itself and to the tenant's rows by URI only: ANALYZE
# (once a written batch, into a tenant with resources once more) collects statistics of the URI
# alone and the row count, not of the wide columns (text, the snapshot's jsonb), which cost it four
# fifths of its time and plan nothing.
_STAGING_STATISTICS = f"ALTER TABLE {STAGING} " + ", ".join(
    f"ALTER COLUMN {column} SET STATISTICS 0" for column in STAGING_COLUMNS if column != "uri"
)
_CREATE_BEFORE = f"CREATE TEMP TABLE {BEFORE} (id bigint PRIMARY KEY, digest text) ON COMMIT DROP"

# The existing rows the import changes, locked in URI order (concurrent imports cannot deadlock),
# with what their digest before needs: metadata, and the text's sha256 (not the text).
_CHANGED_ROWS = f"""
SELECT r.id, r.uri, r.name, r.title, r.description, r.mime_type, r.size, r.icons, r.annotations,
       r.tags, r.consent_message, r.ttl_ms, r.meta, r.blob_sha256,
       encode(sha256(convert_to(r.text, 'UTF8')), 'hex') AS text_sha256
FROM {STAGING} AS s JOIN resources AS r ON r.tenant_id = $1 AND r.uri = s.uri
WHERE {differs("s")}
ORDER BY r.uri
FOR UPDATE OF r
"""

# The staged rows that change nothing (step 3): dropped before anything is looked up or written.
# Only a row as it is now is compared (as the upsert's own no-op test would); one another writer
# changes after this statement and before the commit keeps that writer's body, as if the import
# had committed first.
_DROP_UNCHANGED = f"""
DELETE FROM {STAGING} AS s USING resources AS r
WHERE r.tenant_id = $1 AND r.uri = s.uri AND NOT {differs("s")}
"""

_HAS_RESOURCES = "SELECT EXISTS (SELECT 1 FROM resources WHERE tenant_id = $1)"

# The writes themselves: the one statement every resource write runs, on the staged rows.
_UPSERT = apply_sql(STAGING, key=Key.URI, before=BEFORE, fingerprint="s.fingerprint")

# The tenant's rows whose import fingerprint still stands (no other write since), by fingerprint.
_KNOWN_LINES = (
    "SELECT import_line_sha256, uri FROM resources WHERE tenant_id = $1 AND import_line_sha256 IS NOT NULL"
)

# The modules whose rules decide the row a line becomes (parsing, validation, the URI rule, the
# snapshot and digest, the staging row itself). Their source is part of every fingerprint, so a
# release that changes any rule parses every line again rather than trust a row made by the old one.
_RULE_MODULES = (
    "catalog.core.jsonlines",
    "catalog.core.meta",
    "catalog.core.resources.record",
    "catalog.core.resources.writes",
    "catalog.core.schemas",
    "catalog.core.transfer.jsonl",
    "catalog.core.uris",
    __name__,
)


@functools.cache
def _rules_digest() -> bytes:
    digest = hashlib.sha256()
    for name in _RULE_MODULES:
        source = importlib.import_module(name).__file__
        assert source is not None, name
        path = Path(source)
        for file in sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]:
            digest.update(file.read_bytes())
    return digest.digest()


def line_fingerprint(raw: bytes, max_bytes: int) -> bytes:
    """The fingerprint of a JSONL line as this release reads it under the content limit
    ``max_bytes``: equal fingerprints, equal rows."""
    return hashlib.sha256(_rules_digest() + max_bytes.to_bytes(8, "big") + raw).digest()


@dataclass(frozen=True, slots=True)
class Known:
    """A line whose fingerprint its URI's row still carries (``uri``): the row it would make is the
    row there, so it is neither parsed nor written."""

    uri: str


_UPDATE = "resource.update"


@dataclass
class Prepared:
    """One body as the row it becomes (``values`` in STAGING_COLUMNS order, ``line`` first), the
    bytes of an inline blob to store, or the sha256 of a stored blob it names (size unknown yet)."""

    location: str
    values: list[Any]
    blob: bytes | None = None
    blob_mime_type: str | None = None
    names_blob: str | None = None


def _json(value: Any) -> str:
    """``value`` as the JSON text a jsonb column of the staging table takes; None as JSON null, as
    every other write path stores it (SQLAlchemy's JSON type does). orjson: a few times faster than
    the standard library, and the same jsonb value (the text differs only in escaping non-ASCII,
    which the database decodes); an integer beyond 64 bits, which orjson refuses, goes through
    ``json.dumps``. Validated bodies hold no NaN or Infinity (``storable_json_problem``)."""
    if value is None:
        return "null"
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


def _finish(values: list[Any], columns: dict[str, Any], text_sha256: str | None) -> None:
    snapshot = snapshot_of(columns)
    values.append(_json(snapshot))
    values.append(content_digest(snapshot, text_sha256, columns["blob_sha256"]))


def prepare(location: str, line: int, body: ResourceIn, max_bytes: int, fingerprint: bytes) -> Prepared:
    """``body`` by the rules of a single write, as a staging row (the line's ``fingerprint`` kept
    with it); CatalogError if it breaks one."""
    columns = column_values(body, METADATA_FIELDS)
    text = body.text
    sha: str | None = None
    size: int | None = None
    blob: bytes | None = None
    text_sha256: str | None = None
    if text is not None:
        size = text_size(text, max_bytes)
        text_sha256 = hashlib.sha256(text.encode()).hexdigest()
    elif body.blob is not None:
        blob = base64.b64decode(body.blob, validate=True)
        if len(blob) > max_bytes:
            raise blob_store.too_large(max_bytes)
        sha, size = hashlib.sha256(blob).hexdigest(), len(blob)
    elif body.blob_sha256 is not None:
        sha = body.blob_sha256
    check_directory(columns["mime_type"], text, sha)
    columns.update(text=text, blob_sha256=sha, size=size)
    values = [
        line,
        fingerprint,
        columns["uri"],
        columns["name"],
        columns["title"],
        columns["description"],
        columns["mime_type"],
        _json(columns["icons"]),
        _json(columns["annotations"]),
        columns["tags"],
        columns["consent_message"],
        columns["ttl_ms"],
        _json(columns["meta"]),
        text,
        sha,
        size,
    ]
    if body.blob_sha256 is not None:
        return Prepared(location, values, names_blob=sha)  # snapshot and digest once its size is known
    _finish(values, columns, text_sha256)
    return Prepared(location, values, blob=blob, blob_mime_type=columns["mime_type"] if blob else None)


def _columns_of(values: Sequence[Any]) -> dict[str, Any]:
    named: dict[str, Any] = dict(zip(STAGING_COLUMNS, values, strict=False))
    for key in ("icons", "annotations", "meta"):
        named[key] = json.loads(named[key])
    return named


@dataclass
class BulkResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (location, reason): nothing written


class _Failed(Exception):
    pass


class StartOver(Exception):
    """Writing as the rows are staged (``write_every``) met what only a single write at the end
    does right: a URI again after its first body was written (it must make one version, of its
    last body), or a row of the tenant that another writer made meanwhile (its audit row needs its
    digest before). Nothing was written (the transaction rolled back); the caller imports again
    without ``write_every``."""


async def upsert_all(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    chunks: AsyncIterable[Sequence[Prepared | Known | tuple[str, str]]],
    *,
    write_every: int | None = None,
) -> BulkResult:
    """Write every prepared body of ``chunks`` (or, if any holds a failure ``(location, reason)``,
    nothing); see the module docstring. A :class:`Known` line counts as unchanged; one that comes
    after a body of its URI (the known one would win, unwritten) raises :class:`StartOver`.

    ``write_every``: into a tenant with no resources yet (a first load), write the staged rows
    (the upsert statement) each time that many are staged, in the same transaction, so that the
    database writes while later lines are still parsed; with nothing there before, no staged row
    can change an existing one, and the look-up of the rows before is skipped. Anything that
    breaks that raises :class:`StartOver`. Otherwise (and into a tenant that has resources)
    everything is written at the end.
    """
    result = BulkResult()
    try:
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            if raw is None:  # only a closed or invalidated connection has none
                raise RuntimeError("a pooled connection without its driver connection")
            # One transaction for the whole file: no request's time limit; sorts and hashes of a
            # million rows in memory rather than spilled to disk.
            await raw.execute("SET LOCAL statement_timeout = 0; SET LOCAL work_mem = '64MB'")
            await raw.execute(_CREATE_STAGING)
            await raw.execute(_STAGING_STATISTICS)
            await raw.execute(_CREATE_BEFORE)
            if write_every is not None and await raw.fetchval(_HAS_RESOURCES, tenant.id):
                write_every = None
            written: set[str] = set()  # URIs whose rows have been written
            staged: set[str] = set()  # URIs in the staging table now
            known: set[str] = set()  # URIs of known lines (not staged)
            repeated = False  # whether a staged URI came more than once
            async for chunk in chunks:
                records = []
                for item in chunk:
                    if isinstance(item, tuple):
                        result.failed.append(item)
                        continue
                    if isinstance(item, Known):
                        if write_every is not None or item.uri in staged or item.uri in written:
                            raise StartOver(
                                f"{item.uri}: a known line after a body of it, or in a first load"
                            )
                        known.add(item.uri)
                        continue
                    if item.names_blob is not None:
                        problem = await _resolve_named_blob(conn, tenant.id, item)
                        if problem is not None:
                            result.failed.append(problem)
                            continue
                    if result.failed:
                        continue  # nothing will be written: only look for more failures
                    uri = item.values[_URI]
                    if uri in written:
                        raise StartOver(f"{uri} again after its first body was written")
                    repeated = repeated or uri in staged
                    staged.add(uri)
                    if item.blob is not None:
                        await blob_store.put_bytes(catalog, conn, tenant.id, item.blob, item.blob_mime_type)
                    records.append(tuple(item.values))
                if records and not result.failed:
                    await raw.copy_records_to_table(
                        STAGING, records=records, columns=STAGING_COLUMNS, timeout=_NO_TIMEOUT
                    )
                    if write_every is not None and len(staged) >= write_every:
                        await _write_staged(raw, tenant, principal, len(staged), repeated, result, fresh=True)
                        await raw.execute(f"TRUNCATE {STAGING}")
                        written |= staged
                        staged, repeated = set(), False
            if result.failed:
                raise _Failed
            if staged:
                fresh = write_every is not None  # written so far without looking anything up
                await _write_staged(raw, tenant, principal, len(staged), repeated, result, fresh=fresh)
            # A URI known and then given a body counts once, as that body's write.
            result.unchanged += len(known - staged - written)
    except _Failed:
        pass
    return result


async def _write_staged(
    raw: Any,
    tenant: Tenant,
    principal: Principal,
    count: int,
    repeated: bool,
    result: BulkResult,
    *,
    fresh: bool,
) -> None:
    """Upsert the staged rows (``count`` URIs), adding what happened to ``result``. ``fresh``: the
    tenant had no resources when the import began, so none is looked up (each row must be new)."""
    if repeated:  # the last body of a URI wins
        await raw.execute(
            f"DELETE FROM {STAGING} AS s USING {STAGING} AS t WHERE t.uri = s.uri AND t.line > s.line",
            timeout=_NO_TIMEOUT,
        )
    await raw.execute(f"ANALYZE {STAGING}", timeout=_NO_TIMEOUT)
    if not fresh:
        dropped = int((await raw.execute(_DROP_UNCHANGED, tenant.id, timeout=_NO_TIMEOUT)).split()[-1])
        if dropped:
            # Planned on what is left: a re-import's few changed rows look up by index.
            await raw.execute(f"ANALYZE {STAGING}", timeout=_NO_TIMEOUT)
        changed = await raw.fetch(_CHANGED_ROWS, tenant.id, timeout=_NO_TIMEOUT)
        if changed:
            await raw.copy_records_to_table(
                BEFORE, records=[(row["id"], _digest_before(row)) for row in changed], timeout=_NO_TIMEOUT
            )
    row = await raw.fetchrow(_UPSERT, tenant.id, principal.label, _UPDATE, None, timeout=_NO_TIMEOUT)
    if fresh and row["created"] != count:
        raise StartOver("another writer added resources to the tenant meanwhile")
    result.created += row["created"]
    result.updated += row["updated"]
    result.unchanged += count - row["created"] - row["updated"]


async def known_lines(catalog: Catalog, tenant: Tenant) -> dict[bytes, str]:
    """The fingerprints of the lines that last wrote the tenant's rows (those no other write has
    changed since), each with its row's URI."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        if raw is None:
            raise RuntimeError("a pooled connection without its driver connection")
        await raw.execute("SET LOCAL statement_timeout = 0")
        return {
            bytes(row[0]): row[1] for row in await raw.fetch(_KNOWN_LINES, tenant.id, timeout=_NO_TIMEOUT)
        }


def _digest_before(row: Any) -> str | None:
    columns = dict(row)
    columns["icons"] = _loads(columns["icons"])
    columns["annotations"] = _loads(columns["annotations"])
    columns["meta"] = _loads(columns["meta"])
    return content_digest(snapshot_of(columns), columns["text_sha256"], columns["blob_sha256"])


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def _resolve_named_blob(conn: Any, tenant_id: int, item: Prepared) -> tuple[str, str] | None:
    """Fill in the size of the stored blob the body names (and so its snapshot and digest)."""
    assert item.names_blob is not None
    stored = await blob_store.find_blob(conn, tenant_id, item.names_blob)
    if stored is None:
        return item.location, no_such_blob().one_line()
    item.values[STAGING_COLUMNS.index("size")] = stored.size
    _finish(item.values, _columns_of(item.values), None)
    return None
