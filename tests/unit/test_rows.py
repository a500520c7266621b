"""``catalog.db.rows``: records from rows, one at a time and a page at a time, alike; and a list entry
on the wire from a row's values, as from its record."""

from __future__ import annotations

import inspect
from collections import namedtuple
from datetime import UTC, datetime

from catalog.core.resources import LISTING_ENTRY_FIELDS, ListingEntry, entry_values
from catalog.db.rows import from_row, from_rows
from catalog.mcp.handlers import listing_fields, resource_fields

COLUMNS = ("uri", "name", "title", "description", "mime_type", "size", "icons", "annotations", "meta")
WHEN = datetime(2026, 12, 4, tzinfo=UTC)


def test_a_page_of_rows_makes_the_records_one_row_at_a_time_makes() -> None:
    exact = namedtuple("exact", (*COLUMNS, "content_changed_at"))  # type: ignore[misc]
    extra = namedtuple("extra", (*COLUMNS, "content_changed_at", "text"))  # type: ignore[misc]
    rows = [
        exact(f"file:///{i}", f"n{i}", None, None, "text/plain", i, None, {"a": i}, None, WHEN)
        for i in range(3)
    ]
    made = from_rows(ListingEntry, rows)
    assert made == [from_row(ListingEntry, row) for row in rows]
    assert [entry.uri for entry in made] == ["file:///0", "file:///1", "file:///2"]
    assert made[2].annotations == {"a": 2} and made[2].effective_annotations()["lastModified"].startswith(
        "2026-12-04"
    )
    with_text = [extra(*row, "body") for row in rows]  # a column the entry has no field for: ignored
    assert from_rows(ListingEntry, with_text) == made
    mapped = [row._asdict() for row in rows]
    assert from_rows(ListingEntry, mapped) == made
    assert from_rows(ListingEntry, []) == []


def test_a_wire_entry_from_a_rows_values_is_the_entrys_own() -> None:
    """The plain list path passes a row's values straight to ``listing_fields`` (no ``ListingEntry``
    per row): its parameters are the entry's fields in order, and it writes what ``resource_fields``
    writes for the entry, ``lastModified`` rule included."""
    assert tuple(inspect.signature(listing_fields).parameters) == LISTING_ENTRY_FIELDS
    entries = [
        ListingEntry("file:///a", "a", None, None, None, None, None, None, None, WHEN),
        ListingEntry(
            "file:///b",
            "b",
            "B",
            "about b",
            "text/plain",
            3,
            [{"src": "https://example.com/b.png"}],
            {"priority": 0.5},
            {"k": 1},
            WHEN,
        ),
        ListingEntry(
            "file:///c", "c", None, None, None, 0, None, {"lastModified": "2020-01-01T00:00:00Z"}, {}, WHEN
        ),
    ]
    for entry in entries:
        assert listing_fields(*entry_values(entry)) == resource_fields(entry)
    assert resource_fields(entries[0]) == {
        "uri": "file:///a",
        "name": "a",
        "annotations": {"lastModified": "2026-12-04T00:00:00Z"},
    }
    assert resource_fields(entries[1])["annotations"] == {
        "priority": 0.5,
        "lastModified": "2026-12-04T00:00:00Z",
    }
    assert resource_fields(entries[2])["annotations"] == {"lastModified": "2020-01-01T00:00:00Z"}
    assert resource_fields(entries[2])["size"] == 0 and resource_fields(entries[2])["_meta"] == {}
