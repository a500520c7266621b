"""``catalog.db.rows``: records from rows, one at a time and a page at a time, alike."""

from __future__ import annotations

from collections import namedtuple
from datetime import UTC, datetime

from catalog.core.resources.record import ListingEntry
from catalog.db.rows import from_row, from_rows

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
