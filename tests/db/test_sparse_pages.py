"""A sparse principal's page (``catalog_visible_page``, migrations 0008 and 0010): the grants' URI
ranges, tags and URIs merged in URI order, and each tag read through its index no further than the
page needs."""

from __future__ import annotations

import asyncpg

PAGE = 100
ALL = PAGE + 1  # a page asks for one more row, to know whether there is a next page

RANGE_LOW, RANGE_HIGH = "test://a/", "test://a0"  # the prefix grant "test://a/" as a range
IN_RANGE = [f"test://a/{n:03d}" for n in range(150)]
TAGGED_BEFORE = ["test://a-tagged"]  # below the range: on the first page
TAGGED_AFTER = [f"test://b/{n:03d}" for n in range(300)]  # past the first page's last URI


async def page(conn: asyncpg.Connection, tenant: int, after: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT uri FROM catalog_visible_page($1, false, $2, $3, $4, '{}', $5, $6)",
        tenant,
        [RANGE_LOW],
        [RANGE_HIGH],
        ["t"],
        after,
        ALL,
    )
    return [row["uri"] for row in rows]


async def tag_entries_read(conn: asyncpg.Connection) -> int:
    """Entries of the tag index read so far in this transaction."""
    return await conn.fetchval("SELECT pg_stat_get_xact_tuples_returned('pk_resource_tags'::regclass)")


async def test_a_sparse_page_merges_ranges_and_tags_and_reads_a_tag_only_as_far_as_the_page(
    db: asyncpg.Connection,
) -> None:
    tenant = await db.fetchval("INSERT INTO tenants (slug, name) VALUES ('sparse', 'Sparse') RETURNING id")
    untagged = [(uri, []) for uri in [*IN_RANGE, "test://c/untagged"]]
    tagged = [(uri, ["t"]) for uri in TAGGED_BEFORE + TAGGED_AFTER]
    await db.executemany(
        "INSERT INTO resources (tenant_id, uri, name, tags) VALUES ($1, $2, 'r', $3)",
        [(tenant, uri, tags) for uri, tags in untagged + tagged],
    )
    visible = sorted(IN_RANGE + TAGGED_BEFORE + TAGGED_AFTER)

    async with db.transaction():
        # The plan a pooled connection settles on after a few pages: with the page's last URI
        # unknown at planning time (a first custom plan knows it, and would hide the difference).
        await db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        before = await tag_entries_read(db)
        first = await page(db, tenant, "")
        read = await tag_entries_read(db) - before
    assert first == visible[:ALL]
    # The prefix range fills the page; the tag is read up to the page's last URI and no further:
    # its one entry below, none of the 300 past it (0008 read all 301 through a filter).
    assert read <= 2, read

    walked: list[str] = []
    after = ""
    while True:
        rows = await page(db, tenant, after)
        walked += rows[:PAGE]
        if len(rows) <= PAGE:
            break
        after = rows[PAGE - 1]
    assert walked == visible  # every visible URI once, in order; the untagged one outside never
