"""The change feed: every create, update and delete of a resource, template or grant, in order.

The rows are written by the database's own triggers in the transaction of the change (see the
migrations), so the feed is complete whatever process or SQL session made the change. A reader
polls with ``after=<the last seq it has seen>``. ``seq`` numbers this tenant's changes only (a
sequence per tenant, migration 0004): it grows by one per change, and the only gaps are the
tenant's own rolled-back writes, so it shows nothing of other tenants' activity.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from sqlalchemy import func, select

from catalog.core.schemas import ChangeOut, ChangesPage
from catalog.core.service import Catalog
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import change_feed

MAX_PAGE = 1000
DEFAULT_PAGE = 100


async def list_changes(
    catalog: Catalog, tenant: Tenant, *, after: int = 0, limit: int = DEFAULT_PAGE
) -> ChangesPage:
    """The tenant's changes with ``seq > after``, oldest first, at most ``limit`` (capped)."""
    limit = max(1, min(limit, MAX_PAGE))
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        rows = (
            await conn.execute(
                select(change_feed)
                .where(change_feed.c.tenant_id == tenant.id, change_feed.c.seq > after)
                .order_by(change_feed.c.seq)
                .limit(limit + 1)
            )
        ).all()
    items = [ChangeOut(seq=row.seq, kind=row.kind, uri=row.uri, op=row.op, at=row.at) for row in rows[:limit]]
    last_seq = items[-1].seq if items else after
    return ChangesPage(
        items=items, next_cursor=str(last_seq) if len(rows) > limit else None, last_seq=last_seq
    )


async def recent_changes(catalog: Catalog, tenant: Tenant, *, count: int) -> ChangesPage:
    """The tenant's last ``count`` changes (capped), oldest first: where a view of the feed starts
    when it wants what happened lately rather than everything since the beginning."""
    count = max(1, min(count, MAX_PAGE))
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        rows = (
            await conn.execute(
                select(change_feed)
                .where(change_feed.c.tenant_id == tenant.id)
                .order_by(change_feed.c.seq.desc())
                .limit(count)
            )
        ).all()
    items = [
        ChangeOut(seq=row.seq, kind=row.kind, uri=row.uri, op=row.op, at=row.at) for row in reversed(rows)
    ]
    return ChangesPage(items=items, last_seq=items[-1].seq if items else 0)


async def latest_seq(catalog: Catalog, tenant: Tenant) -> int:
    """The seq of the tenant's latest change (0 before the first): where a live view starts."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        found = await conn.execute(
            select(func.coalesce(func.max(change_feed.c.seq), 0)).where(change_feed.c.tenant_id == tenant.id)
        )
        return int(found.scalar_one())


async def follow_changes(
    catalog: Catalog, tenant: Tenant, *, after: int, wait: Callable[[], Awaitable[bool | None]]
) -> AsyncIterator[ChangeOut | None]:
    """The tenant's changes after ``after``, oldest first, and then each new one as it comes.

    The feed is the source of truth: ``wait`` only says when to read it again (True: something
    changed; None: nothing yet, this yields None so the caller can keep its connection alive;
    False: stop), so an event missed, merged or reported as a gap costs nothing but the next read.
    The caller makes its wake-up source before calling, so no change falls between the first read
    and the first wait."""
    while True:
        page = await list_changes(catalog, tenant, after=after, limit=MAX_PAGE)
        for change in page.items:
            yield change
        after = page.last_seq
        if page.next_cursor is not None:
            continue
        while True:
            woke = await wait()
            if woke is False:
                return
            if woke:
                break
            yield None
