"""What an agent may read: pages of resources and templates, and ``resources/read`` resolution.

Surface-free (no MCP types): the MCP adapter translates these records and errors to the wire.

Every operation loads the caller's :class:`~catalog.core.visibility.Visibility` once and passes it
into SQL, so list, read and templates use the one visibility rule; nothing is filtered in Python.

``read_resource`` resolves a URI, in this order:

1. The URI is validated and canonicalised (:func:`catalog.core.uris.normalize_uri`): RFC 3986, at
   most 2048 bytes, no control characters, and any ``..`` traversal refused, percent-encoded and
   mixed forms included. A refused URI is :class:`InvalidResourceUri`; it never reaches the database.
2. A stored resource with that URI that the caller may see:
   * text -> one text item; blob -> one blob item (the bytes; the adapter base64-encodes them);
   * ``inode/directory`` -> the contents of its visible descendants (the URIs that continue it after
     a ``/``), in URI order, **bounded**: at most :data:`DIRECTORY_MAX_ITEMS` (100) items and
     :data:`DIRECTORY_MAX_BYTES` (1 MiB) of raw content in total; the listing stops before the item
     that would pass either bound and :attr:`ReadOutcome.truncated` says so. Descendant directories
     (no content of their own) and descendants that ask for consent are left out: their contents are
     read one by one. A directory without readable descendants is an empty ``contents`` list (it
     exists and is empty);
   * a resource with a ``consentMessage`` is not read until the caller passes ``consent_purpose``:
     the outcome carries the message and no contents. With a purpose, the contents are read and an
     audit row (``resource.consent``, ``detail.purpose``) is written in the same transaction.
3. Else a visible template whose literal prefix starts the URI (most specific first), that has a
   body, and whose pattern matches: its body rendered with the matched variables.
4. Else :class:`ResourceNotFound`. Invisible and non-existent URIs are the same error.

The MCP fast path answers the commonest reads and pages on the bare driver, with the same
rules (:mod:`catalog.core.direct.reading`, :mod:`catalog.core.direct.listing`); whatever it cannot
answer comes here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import and_, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core import blobs as blob_store
from catalog.core.audit import AuditEntry, record_audit
from catalog.core.catalog import Catalog
from catalog.core.errors import Forbidden, InvalidInput, NotFound
from catalog.core.principal import Principal
from catalog.core.resources import (
    LISTING_COLUMNS,
    ListingFilter,
    ResourceRecord,
    TreeEntry,
    list_page,
    record_from_row,
    tree_page,
)
from catalog.core.schemas.base import ConsentPurpose
from catalog.core.templates import TemplateRecord, template_from_row, template_page
from catalog.core.uri_templates.bodies import render_body
from catalog.core.uri_templates.matching import match
from catalog.core.uri_templates.parsing import parse_template
from catalog.core.uris import (
    InvalidUri,
    descendant_prefix,
    is_descendant,
    normalize_uri,
    uri_prefix_upper_bound,
)
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import resources, templates


def page_size(catalog: Catalog) -> int:
    """Items per page of ``resources/list`` and ``resources/templates/list``: the operator's
    ``CATALOG_PAGE_SIZE``, the one value both executors page by."""
    return catalog.settings.page_size


DIRECTORY_MAX_ITEMS = 100
"""Most content items one read of an ``inode/directory`` returns."""

DIRECTORY_MAX_BYTES = 1024 * 1024
"""Most raw content bytes (text as UTF-8, blobs before base64) one directory read returns."""

RESOURCE_LISTING = "mcp.resources"
TEMPLATE_LISTING = "mcp.templates"
# The read-only tools' listings (``catalog.mcp.tools``): each its own, so a cursor of one is refused
# by another (a cursor also names its filters and the caller's visibility).
SEARCH_LISTING = "mcp.tools.search"
FLAT_LISTING = "mcp.tools.flat"
TREE_LISTING = "mcp.tools.tree"


class ResourceNotFound(NotFound):
    """No visible resource or template body answers this URI (also when it exists but is hidden)."""

    def __init__(self, uri: str) -> None:
        super().__init__("Resource not found")
        self.uri = uri


class InvalidReadParams(InvalidInput):
    """A read whose parameters are wrong whatever the catalogue holds (``-32602`` on MCP)."""

    def __init__(self, uri: str, detail: str) -> None:
        super().__init__(detail)
        self.uri = uri


class InvalidResourceUri(InvalidReadParams):
    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(uri, f"Invalid resource URI: {reason}")
        self.reason = reason


class InvalidConsentPurpose(InvalidReadParams):
    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(uri, f"Invalid consent purpose: {reason}")
        self.reason = reason


_CONSENT_PURPOSE = TypeAdapter(ConsentPurpose)


def check_consent_purpose(purpose: str, *, uri: str = "") -> str:
    """``purpose`` if it may go to the audit log (the free-text rule of
    :mod:`catalog.core.schemas`: at most ``MAX_CONSENT_PURPOSE_LENGTH`` characters, not empty, no
    NUL, valid Unicode); else :class:`InvalidConsentPurpose` naming why. :func:`read_resource`
    calls it before anything is read; a surface may call it earlier to answer sooner."""
    try:
        return _CONSENT_PURPOSE.validate_python(purpose)
    except ValidationError as exc:
        message = str(exc.errors()[0].get("msg", "invalid"))
        raise InvalidConsentPurpose(uri, message.removeprefix("Value error, ")) from None


class NoTenant(Forbidden):
    """The principal is not bound to one tenant (the platform admin), so it has no catalogue to browse."""


@dataclass(frozen=True)
class Content:
    uri: str
    mime_type: str | None
    text: str | None = None
    blob: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ReadOutcome:
    uri: str
    contents: list[Content]
    # Set when the resource asks for consent and none was given: ``contents`` is then empty.
    consent_message: str | None = None
    # A directory read stopped at DIRECTORY_MAX_ITEMS / DIRECTORY_MAX_BYTES.
    truncated: bool = False
    # The stored resource's own cache hint (``resources.ttl_ms``); None: the server's.
    ttl_ms: int | None = None

    @property
    def needs_consent(self) -> bool:
        return self.consent_message is not None


def tenant_of(principal: Principal) -> int:
    """The tenant whose catalogue the principal browses on the agent surface."""
    if principal.tenant_id is None:
        raise NoTenant("this credential is not bound to a tenant; use a tenant token")
    return principal.tenant_id


def canonical_uri(uri: str) -> str:
    try:
        return normalize_uri(uri)
    except InvalidUri as exc:
        raise InvalidResourceUri(uri, exc.reason) from None


# -- listings -------------------------------------------------------------------------------------


async def resources_page(
    catalog: Catalog, principal: Principal, cursor: str | None
) -> tuple[list[ResourceRecord], str | None]:
    """One page (:func:`page_size`) of visible resources in URI byte order; ``InvalidCursor`` on a bad cursor."""
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        return await list_page(
            catalog, conn, visibility, listing=RESOURCE_LISTING, cursor=cursor, limit=page_size(catalog)
        )


async def templates_page(
    catalog: Catalog, principal: Principal, cursor: str | None
) -> tuple[list[TemplateRecord], str | None]:
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        return await template_page(
            catalog, conn, visibility, listing=TEMPLATE_LISTING, cursor=cursor, limit=page_size(catalog)
        )


async def filtered_page(
    catalog: Catalog, principal: Principal, filters: ListingFilter, cursor: str | None, *, listing: str
) -> tuple[list[ResourceRecord], str | None]:
    """One page (:func:`page_size`) of the visible resources passing ``filters``: with a query, the
    search the admin API's ``?q=`` runs (metadata matches first, then text matches, each in URI
    order); else in URI byte order. ``InvalidCursor`` on a bad cursor."""
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        return await list_page(
            catalog,
            conn,
            visibility,
            listing=listing,
            cursor=cursor,
            limit=page_size(catalog),
            filters=filters,
        )


async def folder_page(
    catalog: Catalog, principal: Principal, prefix: str, cursor: str | None
) -> tuple[list[TreeEntry], str | None]:
    """One page (:func:`page_size`) of one level of the URI tree at ``prefix`` (the root when empty):
    the visible resources there and the folders (prefixes ending in ``/``) something visible is
    under, in URI byte order, as the admin API's tree shows them."""
    return await tree_page(
        catalog,
        principal,
        tenant_of(principal),
        prefix=prefix,
        cursor=cursor,
        limit=page_size(catalog),
        listing=TREE_LISTING,
    )


async def visibility_of(catalog: Catalog, principal: Principal) -> Visibility:
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        return await load_visibility(conn, principal, tenant_id)


# -- read -----------------------------------------------------------------------------------------


async def read_resource(
    catalog: Catalog, principal: Principal, uri: str, *, consent_purpose: str | None = None
) -> ReadOutcome:
    """Resolve ``uri`` for ``principal`` (see the module docstring)."""
    key = canonical_uri(uri)
    if consent_purpose is not None:
        consent_purpose = check_consent_purpose(consent_purpose, uri=uri)
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        if visibility.nothing:
            raise ResourceNotFound(uri)
        row = (
            await conn.execute(
                select(resources).where(visibility.resources_clause(resources), resources.c.uri == key)
            )
        ).one_or_none()
        if row is not None:
            record = record_from_row(row)
            if record.consent_message:
                if not consent_purpose:
                    return ReadOutcome(uri, [], consent_message=record.consent_message)
                await record_audit(
                    conn,
                    tenant_id,
                    principal,
                    AuditEntry(
                        action="resource.consent",
                        target_kind="resource",
                        target_id=record.id,
                        uri=record.uri,
                        detail={"purpose": consent_purpose},
                    ),
                )
            if record.is_directory:
                contents, truncated = await _directory_contents(conn, visibility, record)
                return ReadOutcome(uri, contents, truncated=truncated, ttl_ms=record.ttl_ms)
            return ReadOutcome(uri, await _contents_of(conn, record, uri), ttl_ms=record.ttl_ms)
        rendered = await _rendered_template(conn, visibility, key, uri)
        if rendered is not None:
            return ReadOutcome(uri, [rendered])
    raise ResourceNotFound(uri)


async def _contents_of(conn: AsyncConnection, record: ResourceRecord, uri: str) -> list[Content]:
    if record.blob_sha256 is not None:
        data = await blob_store.read_bytes(conn, record.tenant_id, record.blob_sha256)
        return [Content(uri, record.mime_type, blob=data)]
    if record.text is not None:
        return [Content(uri, record.mime_type, text=record.text)]
    return []  # a stored resource without content: it exists and is empty


async def _directory_contents(
    conn: AsyncConnection, visibility: Visibility, directory: ResourceRecord
) -> tuple[list[Content], bool]:
    head = descendant_prefix(directory.uri)
    if head is None:
        return [], False
    clauses = [
        visibility.resources_clause(resources),
        resources.c.uri >= head,
        resources.c.consent_message.is_(None),
        func.coalesce(resources.c.mime_type, "") != "inode/directory",
        resources.c.size.is_not(None),
    ]
    upper = uri_prefix_upper_bound(head)
    if upper is not None:
        clauses.append(resources.c.uri < upper)
    columns = (*LISTING_COLUMNS, resources.c.text)
    rows = (
        await conn.execute(
            select(*columns).where(and_(*clauses)).order_by(resources.c.uri).limit(DIRECTORY_MAX_ITEMS + 1)
        )
    ).all()
    contents: list[Content] = []
    used = 0
    truncated = False
    for row in rows:
        record = record_from_row(row)
        if not is_descendant(directory.uri, record.uri):
            continue  # a ``?``/``#`` continuation of the directory's own URI
        if len(contents) == DIRECTORY_MAX_ITEMS or used + (record.size or 0) > DIRECTORY_MAX_BYTES:
            truncated = True
            break
        used += record.size or 0
        contents.extend(await _contents_of(conn, record, record.uri))
    return contents, truncated


async def _rendered_template(
    conn: AsyncConnection, visibility: Visibility, key: str, uri: str
) -> Content | None:
    """The body of the most specific visible template that matches ``key``, rendered."""
    prefix_len = func.length(templates.c.literal_prefix)
    rows = (
        await conn.execute(
            select(templates)
            .where(
                visibility.templates_clause(templates),
                templates.c.text.is_not(None),
                func.substr(literal(key), 1, prefix_len) == templates.c.literal_prefix,
            )
            .order_by(prefix_len.desc(), templates.c.uri_template)
        )
    ).all()
    for row in rows:
        template = template_from_row(row)
        variables = match(parse_template(template.uri_template), key)
        if variables is None or template.text is None:
            continue
        return Content(
            uri, template.mime_type, text=render_body(template.text, variables, template.mime_type)
        )
    return None
