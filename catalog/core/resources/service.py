"""The resource domain's rules: the one way to write resources, and the one way to list them.

Every write runs in one transaction that changes the row, appends the new version to the history
and writes an audit row; the database's own triggers add the change-feed row and the NOTIFY. So a
change is either wholly there (content, version, audit, feed, event) or not at all.

The rules: content is at most one of text, a base64 blob or an uploaded blob's sha256, bounded by
``CATALOG_MAX_BLOB_BYTES`` either way; a directory has none; a URI is unique in its tenant (409); an
``If-Match`` precondition must name the current ETag (412); a body that changes nothing is not a
write (no version, no audit row, no event). Statements are the repository's
(:mod:`catalog.core.resources.repository`).
"""

from __future__ import annotations

import base64
import hashlib
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core import blobs as blob_store
from catalog.core.audit import AuditEntry, record_audit, record_audits
from catalog.core.catalog import Catalog
from catalog.core.cursors import decode_cursor, encode_cursor
from catalog.core.errors import Conflict, FieldError, InvalidInput, NotFound, PreconditionFailed, TooLarge
from catalog.core.principal import Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.record import METADATA_FIELDS, ListingEntry, ListingValues, ResourceRecord
from catalog.core.resources.repository import NO_FILTER, ListingFilter
from catalog.core.schemas.base import DIRECTORY_MIME_TYPE, column_values
from catalog.core.schemas.resources import ResourceIn, ResourcePatch
from catalog.core.tenants import Tenant
from catalog.core.uris import uri_prefix_upper_bound
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.engine import TenantScope, self_scoped_driver, transaction

MAX_PAGE = 1000
DEFAULT_PAGE = 100


# -- content --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Content:
    """Resolved content for a write: which columns to set, and the size to record."""

    text: str | None
    blob_sha256: str | None
    size: int | None


NO_CONTENT = _Content(None, None, None)


def no_such_blob() -> InvalidInput:
    return InvalidInput(
        "no such blob in this tenant", errors=[FieldError("/blobSha256", "upload the bytes to /blobs first")]
    )


def text_size(text: str, limit: int) -> int:
    """The size of a text content in bytes of UTF-8; TooLarge above ``limit``."""
    size = len(text.encode())
    if size > limit:
        # One limit for content of either kind: text is content as much as a blob is.
        raise TooLarge(
            f"the text is larger than the limit of {limit} bytes (CATALOG_MAX_BLOB_BYTES)",
            errors=[FieldError("/text", f"{size} bytes of UTF-8; at most {limit}")],
        )
    return size


async def _resolve_content(
    catalog: Catalog,
    conn: AsyncConnection,
    tenant_id: int,
    body: ResourceIn | ResourcePatch,
    current: ResourceRecord | None = None,
) -> _Content | None:
    """The content the body names, or None when it names none."""
    if body.text is not None:
        size = text_size(body.text, catalog.settings.max_blob_bytes)
        return _Content(text=body.text, blob_sha256=None, size=size)
    if body.blob is not None:
        data = base64.b64decode(body.blob, validate=True)
        if current is not None and current.blob_sha256 == hashlib.sha256(data).hexdigest():
            return _Content(text=None, blob_sha256=current.blob_sha256, size=len(data))  # stored already
        stored = await blob_store.put_bytes(catalog, conn, tenant_id, data, body.mime_type)
        return _Content(text=None, blob_sha256=stored.sha256, size=stored.size)
    if body.blob_sha256 is not None:
        stored = await blob_store.find_blob(conn, tenant_id, body.blob_sha256)
        if stored is None:
            raise no_such_blob()
        return _Content(text=None, blob_sha256=stored.sha256, size=stored.size)
    return None


def check_directory(mime_type: str | None, text: str | None, blob_sha256: str | None) -> None:
    if mime_type == DIRECTORY_MIME_TYPE and (text is not None or blob_sha256 is not None):
        raise InvalidInput(
            "an inode/directory resource has no content",
            errors=[FieldError("/mimeType", "directory with content")],
        )


def _check_precondition(current: ResourceRecord, if_match: str | None) -> None:
    if if_match is None:
        return
    candidates = {tag.strip() for tag in if_match.split(",")}
    if "*" in candidates:
        return
    weak = {tag[2:] if tag.startswith("W/") else tag for tag in candidates}
    if current.etag not in weak:
        raise PreconditionFailed(f"the resource is at {current.etag}, not {if_match}")


def _conflict(uri: str) -> Conflict:
    return Conflict(
        f"a resource with URI {uri!r} exists already", errors=[FieldError("/uri", "already in use")]
    )


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, tuple):
        old = list(old)
    return old == new


# -- writing --------------------------------------------------------------------------------------


async def _insert_values(
    catalog: Catalog, conn: AsyncConnection, tenant: Tenant, body: ResourceIn
) -> dict[str, Any]:
    content = await _resolve_content(catalog, conn, tenant.id, body) or NO_CONTENT
    return {
        "tenant_id": tenant.id,
        **column_values(body, METADATA_FIELDS),
        "text": content.text,
        "blob_sha256": content.blob_sha256,
        "size": content.size,
    }


async def _created(
    conn: AsyncConnection, principal: Principal, tenant: Tenant, records: Sequence[ResourceRecord]
) -> None:
    """The first version and the audit row of new resources."""
    if not records:
        return
    await rows.append_versions(conn, records, principal.label)
    await record_audits(
        conn,
        tenant.id,
        principal,
        [
            AuditEntry(
                action="resource.create", target_kind="resource", target_id=r.id, uri=r.uri, after=r.digest()
            )
            for r in records
        ],
    )


async def _insert(
    catalog: Catalog, conn: AsyncConnection, principal: Principal, tenant: Tenant, body: ResourceIn
) -> ResourceRecord:
    record = await rows.insert_one(conn, await _insert_values(catalog, conn, tenant, body))
    if record is None:
        raise _conflict(body.uri)
    await _created(conn, principal, tenant, [record])
    return record


async def _update(
    catalog: Catalog,
    conn: AsyncConnection,
    principal: Principal,
    tenant: Tenant,
    current: ResourceRecord,
    body: ResourceIn | ResourcePatch,
    fields: Sequence[str],
    *,
    replace_content: bool,
    action: str = "resource.update",
    detail: dict[str, Any] | None = None,
) -> ResourceRecord:
    values = column_values(body, fields)
    content = await _resolve_content(catalog, conn, tenant.id, body, current)
    if content is None and replace_content:
        content = NO_CONTENT
    content_changed = content is not None and (content.text, content.blob_sha256) != (
        current.text,
        current.blob_sha256,
    )
    if content is not None:
        values.update(text=content.text, blob_sha256=content.blob_sha256, size=content.size)
    check_directory(
        values.get("mime_type", current.mime_type),
        values.get("text", current.text),
        values.get("blob_sha256", current.blob_sha256),
    )
    if all(_same(getattr(current, k), v) for k, v in values.items()):
        return current
    if (
        "uri" in values
        and values["uri"] != current.uri
        and await rows.uri_taken(conn, tenant.id, values["uri"])
    ):
        raise _conflict(values["uri"])
    record = await rows.update_row(conn, tenant.id, current.id, values, content_changed=content_changed)
    await rows.append_version(conn, record, principal.label)
    await record_audit(
        conn,
        tenant.id,
        principal,
        AuditEntry(
            action=action,
            target_kind="resource",
            target_id=record.id,
            uri=record.uri,
            before=current.digest(),
            after=record.digest(),
            detail=detail,
        ),
    )
    return record


async def create_resource(
    catalog: Catalog, principal: Principal, tenant: Tenant, body: ResourceIn
) -> ResourceRecord:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        return await _insert(catalog, conn, principal, tenant, body)


async def upsert_resource(
    catalog: Catalog, principal: Principal, tenant: Tenant, body: ResourceIn, *, if_match: str | None = None
) -> tuple[ResourceRecord, bool]:
    """Create or wholly replace the resource at ``body.uri``; returns it and whether it was created."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, uri=body.uri)
        if current is None:
            if if_match not in (None, "*"):
                raise PreconditionFailed("the resource does not exist")
            try:
                return await _insert(catalog, conn, principal, tenant, body), True
            except Conflict:
                # A concurrent creator won the race for the URI (the insert waited for it and did
                # nothing): replace what it wrote, as the later writer.
                current = await rows.lock(conn, tenant.id, uri=body.uri)
                assert current is not None
        _check_precondition(current, if_match)
        record = await _update(
            catalog, conn, principal, tenant, current, body, METADATA_FIELDS, replace_content=True
        )
        return record, False


async def upsert_many(
    catalog: Catalog, principal: Principal, tenant: Tenant, bodies: Sequence[ResourceIn]
) -> tuple[int, int, int]:
    """Upsert a batch in one transaction (for imports); returns (created, updated, unchanged).

    The same writes as :func:`upsert_resource` body by body, in fewer round trips: one query locks
    the batch's existing rows, the new URIs are inserted (with their versions and audit rows) a few
    statements for the whole batch, and only bodies that change an existing row are written one by
    one. Several bodies for one URI apply in order, the last one winning.
    """
    created = updated = unchanged = 0
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock_uris(conn, tenant.id, [body.uri for body in bodies])
        fresh: dict[str, ResourceIn] = {}
        later: list[ResourceIn] = []
        for body in bodies:
            if body.uri in current or body.uri in fresh:
                later.append(body)
            else:
                fresh[body.uri] = body
        pending = list(fresh.values())
        inserted: list[ResourceRecord] = []
        if pending:
            values = [await _insert_values(catalog, conn, tenant, body) for body in pending]
            inserted = await rows.insert_many(conn, values)
        await _created(conn, principal, tenant, inserted)
        created += len(inserted)
        current.update((record.uri, record) for record in inserted)
        # A URI a concurrent writer created since the lock query: replace it, before later bodies.
        raced = [body for body in pending if body.uri not in current]
        for body in [*raced, *later]:
            before = current.get(body.uri) or await rows.lock(conn, tenant.id, uri=body.uri)
            assert before is not None
            after = await _update(
                catalog, conn, principal, tenant, before, body, METADATA_FIELDS, replace_content=True
            )
            current[body.uri] = after
            if after.version == before.version:
                unchanged += 1
            else:
                updated += 1
    return created, updated, unchanged


async def patch_resource(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    resource_id: int,
    body: ResourcePatch,
    *,
    if_match: str | None = None,
) -> ResourceRecord:
    fields = [name for name in METADATA_FIELDS if name in body.model_fields_set]
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        _check_precondition(current, if_match)
        return await _update(catalog, conn, principal, tenant, current, body, fields, replace_content=False)


async def delete_resource(
    catalog: Catalog, principal: Principal, tenant: Tenant, resource_id: int, *, if_match: str | None = None
) -> None:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        _check_precondition(current, if_match)
        await rows.delete_row(conn, tenant.id, resource_id)
        await record_audit(
            conn,
            tenant.id,
            principal,
            AuditEntry(
                action="resource.delete",
                target_kind="resource",
                target_id=current.id,
                uri=current.uri,
                before=current.digest(),
            ),
        )


# -- reading --------------------------------------------------------------------------------------


async def get_resource(
    catalog: Catalog, tenant: Tenant, resource_id: int, *, include_content: bool = False
) -> tuple[ResourceRecord, bytes | None]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        record = await rows.fetch(conn, tenant.id, resource_id, include_content=include_content)
        if record is None:
            raise NotFound(f"no resource {resource_id}")
        blob = None
        if include_content and record.blob_sha256:
            blob = await blob_store.read_bytes(conn, tenant.id, record.blob_sha256)
    return record, blob


async def list_page(
    catalog: Catalog,
    conn: AsyncConnection,
    visibility: Visibility,
    *,
    listing: str,
    cursor: str | None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = NO_FILTER,
) -> tuple[list[ResourceRecord], str | None]:
    """One keyset page of visible resources in URI byte order, and the cursor to the next page.

    A search (``filters.query``) is ranked in two tiers, each a keyset scan in URI order: first the
    resources whose uri, name, title or description contain the query, then those that match only
    by their text (every word of the query in it). The cursor names the tier and the last URI."""
    after = page_start(catalog, visibility, listing=listing, cursor=cursor, filters=filters)
    if visibility.nothing:
        return [], None
    if filters.query:
        return await _search_page(
            catalog, conn, visibility, listing=listing, after=after, limit=limit, filters=filters
        )
    records = await rows.page_rows(conn, visibility, after=after, limit=limit + 1, filters=filters)
    return page_of(catalog, visibility, records, listing=listing, limit=limit, filters=filters)


Entry = TypeVar("Entry")  # a ListingEntry, or a ListingValues tuple (``uri_of`` then says where its URI is)


async def visible_page(
    catalog: Catalog, visibility: Visibility, *, listing: str, cursor: str | None, limit: int = DEFAULT_PAGE
) -> tuple[list[ListingEntry], str | None]:
    """:func:`list_page` without filters as one statement outside any transaction
    (``repository.visible_page_rows``): the same page and cursor."""
    after = page_start(catalog, visibility, listing=listing, cursor=cursor)
    if visibility.nothing:
        return [], None
    async with self_scoped_driver(catalog.engine) as driver:
        records = await rows.visible_page_rows(driver, visibility, after=after, limit=limit + 1)
    return page_of(catalog, visibility, records, listing=listing, limit=limit)


def listed_page(
    catalog: Catalog, visibility: Visibility, found: Sequence[Any], first: int, *, listing: str, limit: int
) -> tuple[list[ListingValues], str | None]:
    """:func:`visible_page`'s answer, as each entry's values (``ListingValues``), from up to
    ``limit + 1`` rows a caller's own statement read with ``visibility``'s selectors
    (``catalog_plain_page``), their entry columns from ``first`` on."""
    return page_of(
        catalog, visibility, rows.listing_values(found, first), listing=listing, limit=limit, uri_of=_first
    )


def _first(values: ListingValues) -> str:
    return str(values[0])  # an entry's URI: its first field


def page_start(
    catalog: Catalog,
    visibility: Visibility,
    *,
    listing: str,
    cursor: str | None,
    filters: ListingFilter = NO_FILTER,
) -> str | None:
    """Where a page of this listing starts for this caller: after the position its cursor names
    (``InvalidCursor`` for one damaged, forged or minted for another listing or standing)."""
    if not cursor:
        return None
    position = decode_cursor(
        catalog.signing_key, cursor, listing=f"{listing}:{filters.key}", fingerprint=visibility.fingerprint
    )
    return str(position.after)


def page_of(
    catalog: Catalog,
    visibility: Visibility,
    records: list[Entry],
    *,
    listing: str,
    limit: int,
    filters: ListingFilter = NO_FILTER,
    uri_of: Callable[[Entry], str] = operator.attrgetter("uri"),
) -> tuple[list[Entry], str | None]:
    """A page from up to ``limit + 1`` records: the first ``limit``, and the cursor after them when
    there was one more."""
    if len(records) <= limit:
        return records, None
    records = records[:limit]
    return records, cursor_after(catalog, visibility, uri_of(records[-1]), listing=listing, filters=filters)


_METADATA_TIER, _TEXT_TIER = "m", "t"

# Up to this many matches, a search tier scans only them (found through the indexes, see
# ``repository.search_candidates``); beyond it, the scan in URI order with the match as a filter
# finds a page sooner than gathering every match would.
RARE_MATCHES = 5000


async def _rare_matches(
    conn: AsyncConnection, visibility: Visibility, filters: ListingFilter, *, text: bool
) -> list[int] | None:
    """The ids matching the search, when they are few enough to scan only them; else None."""
    assert filters.query
    found = await rows.search_candidates(
        conn, visibility.tenant_id, filters.query, text=text, limit=RARE_MATCHES + 1
    )
    return found if len(found) <= RARE_MATCHES else None


async def _search_page(
    catalog: Catalog,
    conn: AsyncConnection,
    visibility: Visibility,
    *,
    listing: str,
    after: str | None,
    limit: int,
    filters: ListingFilter,
) -> tuple[list[ResourceRecord], str | None]:
    tier, _, last_uri = (after or f"{_METADATA_TIER}:").partition(":")
    if tier not in (_METADATA_TIER, _TEXT_TIER):
        raise InvalidInput("the cursor is invalid, expired or not yours")
    records: list[tuple[str, ResourceRecord]] = []
    if tier == _METADATA_TIER:
        found = await rows.page_rows(
            conn,
            visibility,
            after=last_uri or None,
            limit=limit + 1,
            filters=filters,
            candidates=await _rare_matches(conn, visibility, filters, text=False),
        )
        records += [(_METADATA_TIER, r) for r in found]
        last_uri = ""
    if len(records) <= limit:
        found = await rows.page_rows(
            conn,
            visibility,
            after=last_uri or None,
            limit=limit + 1 - len(records),
            filters=filters,
            text_tier=True,
            candidates=await _rare_matches(conn, visibility, filters, text=True),
        )
        records += [(_TEXT_TIER, r) for r in found]
    next_cursor = None
    if len(records) > limit:
        records = records[:limit]
        tier, record = records[-1]
        next_cursor = cursor_after(
            catalog, visibility, f"{tier}:{record.uri}", listing=listing, filters=filters
        )
    return [record for _, record in records], next_cursor


def cursor_after(
    catalog: Catalog,
    visibility: Visibility,
    uri: str,
    *,
    listing: str,
    filters: ListingFilter = NO_FILTER,
) -> str:
    """The cursor of the page that starts after ``uri`` in this listing, for this caller."""
    return encode_cursor(
        catalog.signing_key, after=uri, listing=f"{listing}:{filters.key}", fingerprint=visibility.fingerprint
    )


async def list_resources(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    *,
    listing: str,
    cursor: str | None = None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = NO_FILTER,
) -> tuple[list[ResourceRecord], str | None]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        visibility = await load_visibility(conn, principal, tenant.id)
        return await list_page(
            catalog, conn, visibility, listing=listing, cursor=cursor, limit=limit, filters=filters
        )


async def list_versions(catalog: Catalog, tenant: Tenant, resource_id: int) -> list[Row[Any]]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        if not await rows.exists(conn, tenant.id, resource_id):
            raise NotFound(f"no resource {resource_id}")
        return await rows.versions(conn, tenant.id, resource_id)


# -- the URI tree ---------------------------------------------------------------------------------


def folder_of(uri: str, prefix: str) -> str | None:
    """The folder of the tree at ``prefix`` that holds ``uri``, or None when ``uri`` is a leaf there.

    A folder is a prefix ending in ``/``, one path segment below ``prefix``. At the root (no prefix)
    the first level is ``scheme://authority/``, so ``file:///a/b`` is under ``file:///`` and
    ``https://h/x`` under ``https://h/``, and ``test://static-text`` is a leaf.
    """
    start = len(prefix)
    if not prefix:
        scheme_end = uri.find("://")
        if scheme_end < 0:
            return None
        start = scheme_end + 3
    slash = uri.find("/", start)
    return uri[: slash + 1] if slash >= 0 else None


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a folder: a sub-folder (a URI prefix) or a resource."""

    folder: str | None = None
    record: ResourceRecord | None = None


TREE_BATCH = 200  # rows per read in a run of resources
TREE_FIRST_BATCH = 16


async def tree_page(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    *,
    prefix: str,
    cursor: str | None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = NO_FILTER,
) -> tuple[list[TreeEntry], str | None]:
    """One keyset page of the folder at ``prefix``: its sub-folders and its resources, in URI order.

    A skip scan: rows are read in URI order a batch at a time, and on meeting a folder the scan
    jumps past everything under it (to the folder's upper bound) with a one-row probe, so a page
    costs at most one index probe per folder shown, however many resources the folders hold, and
    a few batched reads for the resources shown. The same visibility rule and filters
    as the flat listing apply; a folder appears only if something visible is under it.
    """
    listing = f"admin.tree:{prefix}"
    filters = ListingFilter(uri_prefix=prefix or None, tag=filters.tag, mime_type=filters.mime_type)
    key = f"{listing}:{filters.key}"
    after, inclusive = None, False
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        visibility = await load_visibility(conn, principal, tenant.id)
        if cursor:
            position = decode_cursor(
                catalog.signing_key, cursor, listing=key, fingerprint=visibility.fingerprint
            )
            mode, _, bound = str(position.after).partition(":")
            after, inclusive = bound, mode == "from"
        entries: list[TreeEntry] = []
        if visibility.nothing:
            return entries, None
        done = False
        size = TREE_FIRST_BATCH
        while not done and len(entries) <= limit:
            batch = await rows.page_rows(
                conn, visibility, after=after, limit=size, filters=filters, inclusive=inclusive
            )
            done = len(batch) < size
            skip_under: str | None = None
            for record in batch:
                if skip_under is not None and record.uri.startswith(skip_under):
                    continue
                folder = folder_of(record.uri, prefix)
                if folder is None:
                    entries.append(TreeEntry(record=record))
                    skip_under = None
                    after, inclusive = record.uri, False
                else:
                    entries.append(TreeEntry(folder=folder))
                    skip_under = folder
                    upper = uri_prefix_upper_bound(folder)
                    if upper is None:
                        done = True
                        break
                    after, inclusive = upper, True
                if len(entries) > limit:
                    break
            if skip_under is not None and not done:
                # The batch ended inside a folder: continue after it, not through it, with a probe
                # of one row (the next entry may be another folder: reading more would be waste).
                upper = uri_prefix_upper_bound(skip_under)
                if upper is None:
                    done = True
                else:
                    after, inclusive = upper, True
                size = 1
            else:
                # A run of resources: read more of them at a time.
                size = min(TREE_BATCH, max(size * 4, TREE_FIRST_BATCH))
    if len(entries) <= limit:
        return entries, None
    entries = entries[:limit]
    last = entries[-1]
    if last.folder is not None:
        upper = uri_prefix_upper_bound(last.folder)
        if upper is None:
            return entries, None
        position_text = f"from:{upper}"
    else:
        assert last.record is not None
        position_text = f"after:{last.record.uri}"
    next_cursor = encode_cursor(
        catalog.signing_key, after=position_text, listing=key, fingerprint=visibility.fingerprint
    )
    return entries, next_cursor


# -- history --------------------------------------------------------------------------------------


async def get_version(catalog: Catalog, tenant: Tenant, resource_id: int, version: int) -> Row[Any]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        row = await rows.version(conn, tenant.id, resource_id, version)
        if row is None:
            if not await rows.exists(conn, tenant.id, resource_id):
                raise NotFound(f"no resource {resource_id}")
            raise NotFound(f"resource {resource_id} has no version {version}")
        return row


async def restore_version(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    resource_id: int,
    version: int,
    *,
    if_match: str | None = None,
) -> ResourceRecord:
    """Make version ``version`` the current state again (metadata and content) as a new version:
    history is never rewritten. One write like any other (version row, audit ``resource.restore``,
    change-feed row and event by trigger); restoring what is already current changes nothing."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        old = await rows.version(conn, tenant.id, resource_id, version)
        if old is None:
            raise NotFound(f"resource {resource_id} has no version {version}")
        _check_precondition(current, if_match)
        snapshot = {k: v for k, v in old.snapshot.items() if k != "size"}
        if old.text is not None:
            snapshot["text"] = old.text
        elif old.blob_sha256 is not None:
            snapshot["blobSha256"] = old.blob_sha256
        body = ResourceIn.model_validate(snapshot)
        return await _update(
            catalog,
            conn,
            principal,
            tenant,
            current,
            body,
            METADATA_FIELDS,
            replace_content=True,
            action="resource.restore",
            detail={"version": version},
        )
