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

:func:`read_plain` is the hot path for the commonest case (a visible text or blob resource, no
consent, not a directory): authentication, the grants and the row in one statement
(``catalog_plain_read``, ``catalog/db/sql/functions.sql``), which sends the row only when the
selectors passed show it (those the credential's grants compiled to last time); it answers None
for everything else, which then takes :func:`read_resource`. :func:`plain_resources_page` is
:func:`resources_page` with its authentication and grants loaded by that same statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import and_, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core import blobs as blob_store
from catalog.core.audit import AuditEntry, record_audit
from catalog.core.catalog import Catalog
from catalog.core.cursors import InvalidCursor
from catalog.core.errors import Forbidden, InvalidInput, NotFound
from catalog.core.principal import Principal
from catalog.core.resources import (
    LISTING_COLUMNS,
    ListingValues,
    ResourceRecord,
    entry_values,
    list_page,
    listed_page,
    page_start,
    record_from_row,
    visible_page,
)
from catalog.core.schemas.base import DIRECTORY_MIME_TYPE, ConsentPurpose
from catalog.core.templates import TemplateRecord, template_from_row, template_page
from catalog.core.tokens import hash_token, is_opaque_token
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
from catalog.core.visibility import Visibility, load_visibility, visibility_of_grants
from catalog.db.engine import TenantScope, self_scoped_driver, transaction
from catalog.db.models import resources, templates

PAGE_SIZE = 100
"""Items per page of ``resources/list`` and ``resources/templates/list`` (the server's choice)."""

DIRECTORY_MAX_ITEMS = 100
"""Most content items one read of an ``inode/directory`` returns."""

DIRECTORY_MAX_BYTES = 1024 * 1024
"""Most raw content bytes (text as UTF-8, blobs before base64) one directory read returns."""

RESOURCE_LISTING = "mcp.resources"
TEMPLATE_LISTING = "mcp.templates"


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
    """One page (``PAGE_SIZE``) of visible resources in URI byte order; ``InvalidCursor`` on a bad cursor."""
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        return await list_page(
            catalog, conn, visibility, listing=RESOURCE_LISTING, cursor=cursor, limit=PAGE_SIZE
        )


async def templates_page(
    catalog: Catalog, principal: Principal, cursor: str | None
) -> tuple[list[TemplateRecord], str | None]:
    tenant_id = tenant_of(principal)
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        return await template_page(
            catalog, conn, visibility, listing=TEMPLATE_LISTING, cursor=cursor, limit=PAGE_SIZE
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
                return ReadOutcome(uri, contents, truncated=truncated)
            return ReadOutcome(uri, await _contents_of(conn, record, uri))
        rendered = await _rendered_template(conn, visibility, key, uri)
        if rendered is not None:
            return ReadOutcome(uri, [rendered])
    raise ResourceNotFound(uri)


_PLAIN_READ = "SELECT * FROM catalog_plain_read($1, $2, $3, $4, $5)"
_VISIBLE_READ = "SELECT * FROM catalog_plain_read($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
_NO_SELECTORS = (None, None, None, None, None)


@dataclass(frozen=True)
class PlainRead:
    """A read :func:`read_plain` answered: who asked (its principal, as the token lookup would have
    made it) and the one content item."""

    principal: Principal
    content: Content


@dataclass(frozen=True)
class PlainPage:
    """A ``resources/list`` page :func:`plain_resources_page` answered, and for whom."""

    principal: Principal
    entries: list[ListingValues]  # each entry's values (the wire entry is made from them directly)
    next_cursor: str | None


def standing_arguments(token: str | None, principal: Principal | None) -> tuple[object, ...] | None:
    """``catalog_plain_read``'s principal arguments (hash, tenant, scopes, admin) for an opaque
    ``token`` or an authenticated tenant ``principal``; None when there is neither."""
    if token is not None:
        return (hash_token(token), None, None, None) if is_opaque_token(token) else None
    if principal is not None and principal.tenant_id is not None:
        tenant_id = principal.tenant_id
        return (None, tenant_id, tuple(sorted(principal.scopes)), principal.administers(tenant_id))
    return None


def standing_of(row: Any, principal: Principal | None) -> tuple[Principal, Visibility] | None:
    """Who a ``catalog_plain_read`` row names (the token's principal, or ``principal`` as given) and
    what it sees (the one visibility rule, on the grants the row holds)."""
    if row is None or row["principal_tenant_id"] is None:
        return None
    tenant_id: int = row["principal_tenant_id"]
    if principal is None:
        principal = Principal(
            kind="token",
            tenant_id=tenant_id,
            tenant_slug=row["principal_tenant_slug"],
            scopes=frozenset(row["principal_scopes"]),
            is_admin=row["principal_is_admin"],
            token_id=row["principal_token_id"],
            expires_at=row["principal_expires_at"],
        )
    visibility = visibility_of_grants(
        principal,
        tenant_id,
        uris=row["grant_uris"] or (),
        prefixes=row["grant_prefixes"] or (),
        tags=row["grant_tags"] or (),
    )
    return principal, visibility


async def plain_standing(
    catalog: Catalog, key: str | None, token: str | None, principal: Principal | None
) -> tuple[Principal, Visibility, Any] | None:
    """``catalog_plain_read`` for an opaque ``token`` or an authenticated tenant ``principal``: who
    it is, what it sees (the one visibility rule, on the grants the statement returned) and the
    statement's row. No selectors are passed, so the row never holds a resource, whatever ``key``
    (:func:`read_plain` passes them). None for an unknown, revoked or expired token, or a principal
    without a tenant."""
    arguments = standing_arguments(token, principal)
    if arguments is None:
        return None
    async with self_scoped_driver(catalog.engine) as driver:
        row = await driver.fetchrow(_PLAIN_READ, *arguments, key)
    standing = standing_of(row, principal)
    if standing is None:
        return None
    return *standing, row


async def read_plain(
    catalog: Catalog, uri: str, *, token: str | None = None, principal: Principal | None = None
) -> PlainRead | None:
    """``uri`` read in one statement for an opaque ``token`` (looked up by the same statement) or
    an already authenticated tenant ``principal``; None whenever the full path must answer: an
    unknown, revoked or expired token, a refused URI, no visible resource with exactly this URI (a
    template may render it, or the error is the full path's), a directory, a consent message, a
    resource without content.

    The statement sends the row only when the selectors passed show it (a hidden row costs what a
    missing one does): those this credential's visibility had last time. When the grants the
    statement returns compile to other selectors (the credential's first read, its grants changed),
    it is asked once more with those."""
    try:
        key = normalize_uri(uri)
    except InvalidUri:
        return None
    credential = standing_arguments(token, principal)
    if credential is None:
        return None
    guess = catalog.page_visibilities.get(credential)
    for _ in range(2):
        selectors = _NO_SELECTORS if guess is None else (guess.everything, *guess.page_selectors())
        async with self_scoped_driver(catalog.engine) as driver:
            row = await driver.fetchrow(_VISIBLE_READ, *credential, key, *selectors)
        standing = standing_of(row, principal)
        if standing is None:
            return None
        reader, visibility = standing
        if visibility == guess:
            break
        remember_visibility(catalog, credential, visibility)
        guess = visibility
    else:
        return None  # the grants changed between the two statements: the full path decides
    if (
        row["resource_uri"] is None
        or row["resource_consent_message"]
        or row["resource_mime_type"] == DIRECTORY_MIME_TYPE
        or not visibility.allows(row["resource_uri"], row["resource_tags"] or ())
    ):
        return None
    mime_type = row["resource_mime_type"]
    if row["resource_has_blob"]:
        if row["resource_blob"] is None:
            return None
        return PlainRead(reader, Content(uri, mime_type, blob=bytes(row["resource_blob"])))
    if row["resource_text"] is None:
        return None  # no content at all: the full path's empty answer
    return PlainRead(reader, Content(uri, mime_type, text=row["resource_text"]))


_PLAIN_PAGE = "SELECT * FROM catalog_plain_page($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
_NO_GUESS = (None, None, None, None, None, "", 0)
PLAIN_PAGE_LISTED = 9  # catalog_plain_page's first listing column (before it: the principal and its grants)
# Credentials whose last visibility is remembered (each entry a few hundred bytes).
GUESSED_CREDENTIALS = 4096


def remember_visibility(catalog: Catalog, credential: tuple[object, ...], visibility: Visibility) -> None:
    """Keep ``visibility`` as the one the credential (its :func:`standing_arguments`) had last, for
    its next plain request to guess with (the oldest credential forgotten beyond
    :data:`GUESSED_CREDENTIALS`)."""
    remembered = catalog.page_visibilities
    if len(remembered) >= GUESSED_CREDENTIALS and credential not in remembered:
        remembered.pop(next(iter(remembered)))  # the oldest
    remembered[credential] = visibility


async def plain_resources_page(
    catalog: Catalog, cursor: str | None, *, token: str | None = None, principal: Principal | None = None
) -> PlainPage | None:
    """:func:`resources_page` for an opaque ``token`` or an authenticated tenant ``principal``; None
    when the full path must answer (an unknown, revoked or expired token; a cursor that is not this
    caller's, whose error is the full path's).

    One statement (``catalog_plain_page``, migration 0009): the credential's authentication and
    grants, and the page as the visibility this credential had on its last page would show it.
    That page is used only when the visibility computed from the grants just returned is that one;
    otherwise (the first page of a credential, its grants changed) the page is asked again with the
    right selectors (``catalog.core.resources.visible_page``)."""
    arguments = standing_arguments(token, principal)
    if arguments is None:
        return None
    guess = catalog.page_visibilities.get(arguments)
    selectors: tuple[object, ...] = _NO_GUESS
    if guess is not None and not guess.nothing:
        try:
            after = page_start(catalog, guess, listing=RESOURCE_LISTING, cursor=cursor)
        except InvalidCursor:
            guess = None  # the full path decides, with the visibility the statement finds
        else:
            selectors = (guess.everything, *guess.page_selectors(), after or "", PAGE_SIZE + 1)
    async with self_scoped_driver(catalog.engine) as driver:
        found = await driver.fetch(_PLAIN_PAGE, *arguments, *selectors)
    standing = standing_of(found[0], principal) if found else None
    if standing is None:
        return None
    principal, visibility = standing
    if visibility != guess:
        remember_visibility(catalog, arguments, visibility)
    try:
        if visibility == guess and selectors is not _NO_GUESS:
            records, next_cursor = listed_page(
                catalog, visibility, found[1:], PLAIN_PAGE_LISTED, listing=RESOURCE_LISTING, limit=PAGE_SIZE
            )
        else:
            found_entries, next_cursor = await visible_page(
                catalog, visibility, listing=RESOURCE_LISTING, cursor=cursor, limit=PAGE_SIZE
            )
            records = [entry_values(entry) for entry in found_entries]
    except InvalidCursor:
        return None
    return PlainPage(principal, records, next_cursor)


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
