"""Resources: list (keyset pages, filters), create, upsert by URI, read, partial update, delete, history.

Every write is one core call, which changes the row, appends the version, writes the audit row and
(by trigger) the change-feed row in one transaction. Reads and writes answer with an ``ETag``;
``If-Match`` on PUT/PATCH/DELETE makes the write conditional (412 when stale, nothing changed).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Response, status
from fastapi.responses import JSONResponse

from catalog.admin.deps import AdminTenantDep, CatalogDep, Cursor, ItemId, LimitDep, PrincipalDep
from catalog.core import resources as core
from catalog.core.errors import FieldError, InvalidInput
from catalog.core.principal import Author
from catalog.core.resources import ListingFilter, ResourceRecord
from catalog.core.resources.batch import apply_batch
from catalog.core.resources.search import Snippet
from catalog.core.schemas.audit import AuthorOut
from catalog.core.schemas.base import (
    MAX_SEARCH_LENGTH,
    MEDIA_TYPE_FILTER_PATTERN,
    SEARCH_PATTERN,
    Page,
    Tag,
    Uri,
    UriPrefix,
)
from catalog.core.schemas.resources import (
    MAX_BATCH,
    ResourceBatchIn,
    ResourceBatchOut,
    ResourceIn,
    ResourceOut,
    ResourcePatch,
    ResourcePut,
    ResourceVersionDetailOut,
    ResourceVersionOut,
    SnippetOut,
    SnippetPartOut,
)

router = APIRouter(prefix="/tenants/{slug}/resources", tags=["resources"])

IfMatch = Annotated[
    str | None,
    Header(alias="If-Match", max_length=1024, description="the ETag you last read; 412 when it is stale"),
]
Search = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_SEARCH_LENGTH,
        pattern=SEARCH_PATTERN,
        description=(
            "search: a case-insensitive substring of uri, name, title or description, or every word "
            "of it in the text; metadata matches come first, then text matches, each in URI order"
        ),
    ),
]
MimeFilter = Annotated[
    str | None,
    Query(
        alias="mimeType",
        max_length=255,
        pattern=MEDIA_TYPE_FILTER_PATTERN,
        description="exactly this media type, or `type/*` for all of a type (e.g. `image/*`)",
    ),
]
VersionNumber = Annotated[int, Path(ge=1, le=2**31 - 1, description="the version number")]
_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such tenant or resource"},
    412: {"description": "If-Match is stale; nothing was changed"},
    422: {"description": "invalid input (problem JSON with field pointers)"},
}


def _location(slug: str, record: ResourceRecord) -> str:
    return f"/admin/v1/tenants/{slug}/resources/{record.id}"


def _answer(record: ResourceRecord, status_code: int, **headers: str) -> JSONResponse:
    return JSONResponse(
        record.to_out().dump(), status_code=status_code, headers={"ETag": record.etag, **headers}
    )


@router.get("", response_model=Page[ResourceOut], response_model_exclude_none=True)
async def list_resources(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    limit: LimitDep,
    cursor: Cursor = None,
    uri_prefix: Annotated[UriPrefix | None, Query(alias="uriPrefix")] = None,
    tag: Annotated[Tag | None, Query()] = None,
    q: Search = None,
    mime_type: MimeFilter = None,
) -> Page[ResourceOut]:
    """Resources in URI byte order, a keyset page at a time (no content; see ``include=content``).
    A search (``q``) adds to each resource a ``snippet`` of what matched."""
    filters = ListingFilter(uri_prefix=uri_prefix, tag=tag, query=q, mime_type=mime_type)
    if q:
        records, snippets, next_cursor = await core.search_resources(
            catalog, principal, tenant, listing="admin.resources", cursor=cursor, limit=limit, filters=filters
        )
        items = [_with_snippet(r.to_out(), snippets.get(r.id)) for r in records]
        return Page[ResourceOut](items=items, next_cursor=next_cursor)
    records, next_cursor = await core.list_resources(
        catalog, principal, tenant, listing="admin.resources", cursor=cursor, limit=limit, filters=filters
    )
    return Page[ResourceOut](items=[r.to_out() for r in records], next_cursor=next_cursor)


def _with_snippet(out: ResourceOut, snippet: Snippet | None) -> ResourceOut:
    if snippet is not None:
        out.snippet = SnippetOut(
            field=snippet.field,
            parts=[SnippetPartOut(text=text, match=match) for text, match in snippet.parts],
        )
    return out


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ResourceOut,
    response_model_exclude_none=True,
    responses={409: {"description": "the URI is taken"}, 413: {"description": "blob too large"}},
)
async def create_resource(
    body: ResourceIn, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> JSONResponse:
    """Create a resource with ``text``, a base64 ``blob``, a ``blobSha256`` of an uploaded blob, or
    no content (e.g. an ``inode/directory``). ``size`` is computed. A taken URI is 409."""
    record = await core.create_resource(catalog, principal, tenant, body)
    return _answer(record, status.HTTP_201_CREATED, Location=_location(tenant.slug, record))


@router.post(
    "/batch",
    response_model=ResourceBatchOut,
    description=(
        f"One action over up to {MAX_BATCH} resources by id, in one transaction: all or nothing. "
        "`delete` deletes them; `tag` adds `tag` to each (one that carries it already is left "
        "alone); `grant` gives `scope` a `{scope, uri}` grant of each one's URI (an existing one is "
        "kept). An id that is not a resource of this tenant is a 422 pointing at it (`/ids/3`), "
        "and nothing is changed. Each item is audited as its single operation is."
    ),
    responses={422: {"description": "invalid input, or ids not in this tenant (named); nothing changed"}},
)
async def batch(
    body: ResourceBatchIn, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> ResourceBatchOut:
    return await apply_batch(catalog, principal, tenant, body)


@router.put(
    "",
    response_model=ResourceOut,
    response_model_exclude_none=True,
    responses={200: {"description": "replaced"}, 201: {"description": "created"}, **_RESPONSES},
)
async def upsert_resource(
    body: ResourcePut,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    uri: Annotated[Uri, Query(description="the resource's URI (the body's uri may be left out)")],
    if_match: IfMatch = None,
) -> JSONResponse:
    """Create (201) or wholly replace (200) the resource at ``uri``. Fields left out are cleared;
    an unchanged body does not bump the version. ``If-Match: *`` or an ETag makes it conditional."""
    if body.uri is not None and body.uri != uri:
        raise InvalidInput(
            "the body names another URI than the query",
            errors=[FieldError("/uri", f"must be {uri!r} (the ?uri= of the request) or left out")],
        )
    record, created = await core.upsert_resource(
        catalog, principal, tenant, body.model_copy(update={"uri": uri}), if_match=if_match
    )
    if created:
        return _answer(record, status.HTTP_201_CREATED, Location=_location(tenant.slug, record))
    return _answer(record, status.HTTP_200_OK)


@router.get("/{id}", response_model=ResourceOut, response_model_exclude_none=True, responses=_RESPONSES)
async def get_resource(
    id: ItemId,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    include: Annotated[
        Literal["content"] | None, Query(description="`content` adds text or base64 blob")
    ] = None,
    if_none_match: Annotated[str | None, Header(alias="If-None-Match", max_length=1024)] = None,
) -> Response:
    """One resource, with its ETag; ``If-None-Match`` with the current ETag answers 304."""
    record, blob = await core.get_resource(catalog, tenant, id, include_content=include == "content")
    if if_none_match is not None and record.etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": record.etag})
    out = record.to_out(include_content=include == "content", blob=blob)
    return JSONResponse(out.dump(), headers={"ETag": record.etag})


@router.patch("/{id}", response_model=ResourceOut, response_model_exclude_none=True, responses=_RESPONSES)
async def patch_resource(
    id: ItemId,
    body: ResourcePatch,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    if_match: IfMatch = None,
) -> JSONResponse:
    """Change only the fields present (``null`` clears an optional one); content given replaces the
    content. With ``If-Match`` the change happens only at that ETag (412 otherwise)."""
    record = await core.patch_resource(catalog, principal, tenant, id, body, if_match=if_match)
    return _answer(record, status.HTTP_200_OK)


@router.delete("/{id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response, responses=_RESPONSES)
async def delete_resource(
    id: ItemId,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    if_match: IfMatch = None,
) -> Response:
    await core.delete_resource(catalog, principal, tenant, id, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{id}/versions",
    response_model=Page[ResourceVersionOut],
    response_model_exclude_none=True,
    responses=_RESPONSES,
)
async def list_versions(
    id: ItemId,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    limit: LimitDep,
    cursor: Cursor = None,
) -> Page[ResourceVersionOut]:
    """The resource's history, newest version first, a keyset page at a time (content named by
    sha256, not inlined). ``author`` names who made each version (a token by its name)."""
    entries, next_cursor = await core.list_versions(
        catalog, principal, tenant, id, cursor=cursor, limit=limit
    )
    return Page[ResourceVersionOut](
        items=[_version_out(e.row, e.author) for e in entries], next_cursor=next_cursor
    )


def _version_out(row: Any, author: Author | None = None) -> ResourceVersionOut:
    """One entry of the history; its content is named by digest, not inlined."""
    return ResourceVersionOut(
        version=row.version,
        uri=row.uri,
        changed_at=row.changed_at,
        changed_by=row.changed_by,
        author=AuthorOut.model_validate(author, from_attributes=True) if author else None,
        resource=row.snapshot,
        blob_sha256=row.blob_sha256,
        text_sha256=hashlib.sha256(row.text.encode()).hexdigest() if row.text is not None else None,
    )


@router.get(
    "/{id}/versions/{version}",
    response_model=ResourceVersionDetailOut,
    response_model_exclude_none=True,
    responses=_RESPONSES,
)
async def get_version(
    id: ItemId, version: VersionNumber, tenant: AdminTenantDep, catalog: CatalogDep
) -> ResourceVersionDetailOut:
    """One version: its metadata and its text (a blob is named by ``blobSha256``; fetch it from
    ``/blobs/{sha256}``)."""
    entry = await core.get_version(catalog, tenant, id, version)
    return ResourceVersionDetailOut(**_version_out(entry.row, entry.author).model_dump(), text=entry.row.text)


@router.post(
    "/{id}/versions/{version}/restore",
    response_model=ResourceOut,
    response_model_exclude_none=True,
    responses=_RESPONSES,
)
async def restore_version(
    id: ItemId,
    version: VersionNumber,
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    if_match: IfMatch = None,
) -> JSONResponse:
    """Make that version current again, as a new version (the history is kept). Audited as
    ``resource.restore``; the change feed and subscribers see an update."""
    record = await core.restore_version(catalog, principal, tenant, id, version, if_match=if_match)
    return _answer(record, status.HTTP_200_OK)
