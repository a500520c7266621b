"""The one way a resource row is written, and the one owner of the version row.

:func:`apply_sql` builds the statement every resource write runs -- a single write (create,
upsert, patch, restore of a version), a batch of a directory import, the staged rows of a JSONL
import. It applies
rows (one, or many) and, in the same statement:

- the no-op test: a row identical to the current one in every written column is not written (no
  version, no audit row, no change-feed row, no event);
- the version bump, ``updated_at``, and ``content_changed_at`` when the text or blob changed;
- the version row (:data:`VERSION_COLUMNS`, the snapshot the row keeps in its history);
- the audit row (``resource.create``, or the caller's action for an update, with its digests).

The change-feed rows and the NOTIFY follow from the database's statement-level triggers. A delete
is no write of a row: :func:`~catalog.core.resources.writes.delete_resource` deletes it and audits
that.

The rows come from a *source*: the COPY staging table of an import, or :data:`ROWS_SOURCE`, the
rows a caller has in hand bound as one array per column (one row or many: the same statement).
Each row carries what it becomes (:data:`WRITTEN`), the snapshot its version keeps and its audit
digest after (:func:`staged_row`: the record's own rules, :func:`snapshot_of` and
:func:`content_digest`). What it replaces is found by :class:`Key`: by URI (an import), as a new
URI only (a create), or by id (an update of a row the caller has locked, whose URI may change).

A restore reproduces history instead of making new history: it writes versions as they were,
through :func:`restore_versions`, whose columns are the same :data:`VERSION_COLUMNS`.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.resources.record import METADATA_FIELDS, ResourceRecord, content_digest, snapshot_of
from catalog.db.rows import from_rows

# What a write sets, uri first; also what the no-op test compares.
WRITTEN = (*METADATA_FIELDS, "text", "blob_sha256", "size")
# A version row's columns: what history keeps of each state of a resource.
VERSION_COLUMNS = (
    "tenant_id",
    "resource_id",
    "version",
    "uri",
    "snapshot",
    "text",
    "blob_sha256",
    "changed_by",
    "changed_at",
)
_AUDIT_COLUMNS = (
    "tenant_id",
    "principal",
    "action",
    "target_kind",
    "target_id",
    "uri",
    "before_digest",
    "after_digest",
    "detail",
)

CREATE = "resource.create"


class Key(enum.Enum):
    """How a source row finds the row it replaces."""

    URI = "uri"  # the tenant's row with its URI, if any (else it is created)
    NEW = "new"  # none: a row whose URI is taken is left out (not written, not returned)
    ID = "id"  # the row whose id the source row names (``id`` column)


def version_insert(select: str) -> str:
    """``INSERT`` of version rows whose values (in :data:`VERSION_COLUMNS` order) ``select`` gives."""
    return f"INSERT INTO resource_versions ({', '.join(VERSION_COLUMNS)}) {select}"


def differs(source: str) -> str:
    """The no-op test: whether the row ``source`` differs from the current row ``r`` in what a
    write sets."""
    current = ", ".join(f"r.{c}" for c in WRITTEN)
    given = ", ".join(f"{source}.{c}" for c in WRITTEN)
    return f"({current}) IS DISTINCT FROM ({given})"


def _bump(source: str) -> str:
    """The bookkeeping of a write that changes a row (``r`` is the row before it)."""
    return (
        "version = r.version + 1, updated_at = now(), content_changed_at = CASE"
        f" WHEN (r.text, r.blob_sha256) IS DISTINCT FROM ({source}.text, {source}.blob_sha256)"
        " THEN now() ELSE r.content_changed_at END"
    )


# The row's import fingerprint (``resources.import_line_sha256``): only an import's source has one;
# every other write clears it, so a re-import never skips the line of a row changed since.
NO_FINGERPRINT = "NULL::bytea"


def apply_sql(
    source: str,
    *,
    key: Key,
    before: str | None = None,
    returning: bool = False,
    fingerprint: str = NO_FINGERPRINT,
) -> str:
    """The statement that writes the rows of ``source`` (a relation, aliased ``s`` here, with the
    :data:`WRITTEN` columns, ``snapshot`` (jsonb), ``digest`` and, for :attr:`Key.ID`, ``id``).

    Parameters: ``$1`` the tenant id, ``$2`` the principal's label (the version's ``changed_by``
    and the audit row's principal), ``$3`` the audit action of an update, ``$4`` its detail (jsonb
    or NULL); a source may use more. ``before``: a relation ``(id, digest)`` with the audit digest
    of each row an update replaces (none: NULL). ``fingerprint``: the SQL of each source row's
    import fingerprint (an import's line, ``s.<column>``); a row written is given it, or NULL.
    With ``returning`` the statement answers every written row (all of its columns, and
    ``created``); without, one row: the counts ``created`` and ``updated``. A source row that
    changes nothing is in neither.
    """
    columns = ", ".join(WRITTEN)
    selected = ", ".join(f"s.{c}" for c in WRITTEN)
    out = "r.*" if returning else "r.id, r.uri, r.version, r.text, r.blob_sha256"
    if key is Key.ID:
        up = (
            f"UPDATE resources AS r SET {', '.join(f'{c} = s.{c}' for c in WRITTEN)}, {_bump('s')},"
            f" import_line_sha256 = {fingerprint}"
            f" FROM {source} AS s WHERE r.tenant_id = $1 AND r.id = s.id AND {differs('s')}"
            f" RETURNING {out}, false AS created"
        )
    else:
        up = (
            f"INSERT INTO resources AS r (tenant_id, {columns}, import_line_sha256)"
            f" SELECT $1, {selected}, {fingerprint}"
            f" FROM {source} AS s ORDER BY s.uri"  # URI order: concurrent writers cannot deadlock
        )
        if key is Key.NEW:
            up += f" ON CONFLICT (tenant_id, uri) DO NOTHING RETURNING {out}, true AS created"
        else:
            up += (
                " ON CONFLICT (tenant_id, uri) DO UPDATE SET"
                f" {', '.join(f'{c} = excluded.{c}' for c in WRITTEN[1:])}, {_bump('excluded')},"
                " import_line_sha256 = excluded.import_line_sha256"
                f" WHERE {differs('excluded')}"
                f" RETURNING {out}, (r.xmax = 0) AS created"
            )
    before_join, before_digest = "", "NULL"
    if before is not None:
        before_join, before_digest = f" LEFT JOIN {before} AS b ON b.id = w.id", "b.digest"
    versions = version_insert(
        "SELECT $1, w.id, w.version, w.uri, w.snapshot, w.text, w.blob_sha256, $2, now() FROM written AS w"
    )
    audit = (
        f"INSERT INTO audit_log ({', '.join(_AUDIT_COLUMNS)})"
        f" SELECT $1, $2, CASE WHEN w.created THEN '{CREATE}' ELSE $3::text END, 'resource', w.id,"
        f" w.uri, {before_digest}, w.digest, CASE WHEN w.created THEN NULL ELSE $4::jsonb END"
        f" FROM written AS w{before_join} ORDER BY w.id"
    )
    answer = (
        "SELECT w.* FROM written AS w ORDER BY w.uri"
        if returning
        else "SELECT count(*) FILTER (WHERE created) AS created,"
        " count(*) FILTER (WHERE NOT created) AS updated FROM written"
    )
    return (
        f"WITH up AS ({up}), written AS MATERIALIZED ("
        f"SELECT up.*, s.snapshot, s.digest FROM up JOIN {source} AS s ON s.uri = up.uri"
        f"), versions AS ({versions}), audit AS ({audit}) {answer}"
    )


# -- rows in hand -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StagedRow:
    """One row to apply: the values it writes (:data:`WRITTEN`), what its version keeps, its audit
    digest after, and for an update by id the row it replaces and that row's digest."""

    values: Mapping[str, Any]
    snapshot: dict[str, Any]
    digest: str | None
    id: int | None = None
    before: str | None = None


def staged_row(values: Mapping[str, Any], *, replaces: ResourceRecord | None = None) -> StagedRow:
    """``values`` (every :data:`WRITTEN` column) as a row to apply; ``replaces``: the current row
    it updates (by id)."""
    text = values["text"]
    snapshot = snapshot_of(values)
    text_sha256 = hashlib.sha256(text.encode()).hexdigest() if text is not None else None
    return StagedRow(
        values={c: values[c] for c in WRITTEN},
        snapshot=snapshot,
        digest=content_digest(snapshot, text_sha256, values["blob_sha256"]),
        id=replaces.id if replaces is not None else None,
        before=replaces.digest() if replaces is not None else None,
    )


# The source of rows in hand: one array per column (parameters from $5 on), ``tags`` as JSON
# arrays (``unnest`` would flatten an array of arrays), JSON columns as JSON text (None as JSON
# null, as an import's COPY stores it).
_ROW_TYPES = (
    ("id", "bigint"),
    ("uri", "text"),
    ("name", "text"),
    ("title", "text"),
    ("description", "text"),
    ("mime_type", "text"),
    ("icons", "jsonb"),
    ("annotations", "jsonb"),
    ("tags", "jsonb"),
    ("consent_message", "text"),
    ("ttl_ms", "integer"),
    ("meta", "jsonb"),
    ("text", "text"),
    ("blob_sha256", "text"),
    ("size", "bigint"),
    ("snapshot", "jsonb"),
    ("digest", "text"),
    ("before", "text"),
)
_JSON = {"icons", "annotations", "meta", "snapshot", "tags"}
_COLLATED = {"uri", "blob_sha256"}  # the columns' own collation: equal to theirs, byte order


def _unnest() -> str:
    arrays = ", ".join(f"${index}::{kind}[]" for index, (_, kind) in enumerate(_ROW_TYPES, start=5))
    names = ", ".join(name for name, _ in _ROW_TYPES)
    return f"unnest({arrays}) AS u({names})"


def _row_column(name: str) -> str:
    if name == "tags":
        return "ARRAY(SELECT jsonb_array_elements_text(u.tags)) AS tags"
    if name in _COLLATED:
        return f'u.{name} COLLATE "C" AS {name}'
    return f"u.{name}"


ROWS_SOURCE = (
    f"(SELECT {', '.join(_row_column(name) for name, _ in _ROW_TYPES if name != 'before')} FROM {_unnest()})"
)
ROWS_BEFORE = f"(SELECT u.id, u.before AS digest FROM {_unnest()} WHERE u.before IS NOT NULL)"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _row_arguments(rows: Sequence[StagedRow]) -> list[list[Any]]:
    arrays: list[list[Any]] = []
    for name, _ in _ROW_TYPES:
        if name == "id":
            arrays.append([row.id for row in rows])
        elif name == "snapshot":
            arrays.append([_json(row.snapshot) for row in rows])
        elif name == "digest":
            arrays.append([row.digest for row in rows])
        elif name == "before":
            arrays.append([row.before for row in rows])
        elif name == "tags":
            arrays.append([_json(list(row.values["tags"] or ())) for row in rows])
        elif name in _JSON:
            arrays.append([_json(row.values[name]) for row in rows])
        else:
            arrays.append([row.values[name] for row in rows])
    return arrays


async def apply_rows(
    conn: AsyncConnection,
    tenant_id: int,
    changed_by: str,
    rows: Sequence[StagedRow],
    *,
    key: Key,
    action: str = "resource.update",
    detail: dict[str, Any] | None = None,
) -> list[ResourceRecord]:
    """Apply ``rows`` (:func:`apply_sql` on :data:`ROWS_SOURCE`) in ``conn``'s transaction; the
    rows written, as records (a row that changed nothing, or a new one whose URI was taken, is not
    among them)."""
    if not rows:
        return []
    # Through SQLAlchemy (``$n`` parameters pass as they are): a refusal surfaces as the same
    # ``IntegrityError`` or ``DataError`` as any other statement of the transaction.
    statement = apply_sql(ROWS_SOURCE, key=key, before=ROWS_BEFORE, returning=True)
    arguments = (action, None if detail is None else _json(detail), *_row_arguments(rows))
    found = (await conn.exec_driver_sql(statement, (tenant_id, changed_by, *arguments))).all()
    return from_rows(ResourceRecord, found)


# -- history as it was ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PastVersion:
    """A version row as a backup kept it; its resource named by URI (ids are new on restore)."""

    resource_uri: str
    version: int
    uri: str
    snapshot: dict[str, Any]
    text: str | None
    blob_sha256: str | None
    changed_by: str
    changed_at: datetime


# The new resource ids are looked up in the same statement, by the resource's URI.
_RESTORE_VERSIONS = version_insert(
    "SELECT r.tenant_id, r.id, v.version, v.uri, v.snapshot, v.text, v.blob_sha256, v.changed_by,"
    " v.changed_at"
    " FROM unnest($2::text[], $3::int[], $4::text[], $5::jsonb[], $6::text[], $7::text[], $8::text[],"
    " $9::timestamptz[])"
    " AS v(resource_uri, version, uri, snapshot, text, blob_sha256, changed_by, changed_at)"
    ' JOIN resources AS r ON r.tenant_id = $1 AND r.uri = v.resource_uri COLLATE "C"'
)


async def restore_versions(conn: AsyncConnection, tenant_id: int, versions: Sequence[PastVersion]) -> int:
    """Write ``versions`` as they were; how many named a resource of the tenant (the others are
    not written)."""
    result = await conn.exec_driver_sql(
        _RESTORE_VERSIONS,
        (
            tenant_id,
            [v.resource_uri for v in versions],
            [v.version for v in versions],
            [v.uri for v in versions],
            [_json(v.snapshot) for v in versions],
            [v.text for v in versions],
            [v.blob_sha256 for v in versions],
            [v.changed_by for v in versions],
            [v.changed_at for v in versions],
        ),
    )
    return result.rowcount
