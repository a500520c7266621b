"""The URI tree: a tenant's resources as folders and files, one keyset page of one folder at a time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from catalog.admin.deps import AdminTenantDep, CatalogDep, Cursor, LimitDep, PrincipalDep
from catalog.admin.resources import MimeFilter
from catalog.core import resources as core
from catalog.core.resources import ListingFilter
from catalog.core.schemas.base import Page, Tag, UriPrefix
from catalog.core.schemas.resources import TreeEntryOut

router = APIRouter(prefix="/tenants/{slug}", tags=["resources"])


@router.get("/tree", response_model=Page[TreeEntryOut], response_model_exclude_none=True)
async def browse_tree(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    limit: LimitDep,
    cursor: Cursor = None,
    prefix: Annotated[
        UriPrefix | None,
        Query(description="the folder to open: a prefix ending in '/' (none: the root)"),
    ] = None,
    tag: Annotated[Tag | None, Query()] = None,
    mime_type: MimeFilter = None,
) -> Page[TreeEntryOut]:
    """The folder at ``prefix``: sub-folders (one path segment deeper, ending in '/') and resources,
    in URI byte order. At the root the first level is ``scheme://authority/``. A folder is shown
    when something under it passes the filters. A directory resource (``inode/directory`` at
    ``…/api``) whose folder ``…/api/`` is shown is not a separate entry: the folder entry carries it
    as ``resource``, at the resource's place in the order; with nothing shown under it, it is a
    plain resource entry."""
    folder = prefix or ""
    entries, next_cursor = await core.tree_page(
        catalog,
        principal,
        tenant.id,
        prefix=folder,
        cursor=cursor,
        limit=limit,
        filters=ListingFilter(tag=tag, mime_type=mime_type),
        carry_directories=True,
    )
    items = []
    for entry in entries:
        if entry.folder is not None:
            carried = entry.record.to_out() if entry.record is not None else None
            items.append(
                TreeEntryOut(
                    kind="folder", name=entry.folder[len(folder) :], prefix=entry.folder, resource=carried
                )
            )
        else:
            assert entry.record is not None
            name = entry.record.uri[len(folder) :] or entry.record.uri
            items.append(TreeEntryOut(kind="resource", name=name, resource=entry.record.to_out()))
    return Page[TreeEntryOut](items=items, next_cursor=next_cursor)
