"""The resource write rules that are Python, without a database.

What is tested here: the row a write stages (``writer.staged_row``: its values, the snapshot its
version keeps, its audit digest), the digest rule (``record.content_digest``, ``snapshot_of``),
and the checks a write makes before its statement (``writes.check_precondition``,
``check_directory``, ``text_size``). The no-op test and the version bump are not Python: they are
clauses of the one SQL statement ``writer.apply_sql`` builds (``IS DISTINCT FROM`` over
:data:`WRITTEN`, ``version = r.version + 1``), so here they are checked as the statement's text;
``tests/properties/test_resource_writer.py`` runs them on PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.core.audit import digest
from catalog.core.errors import InvalidInput, PreconditionFailed, TooLarge
from catalog.core.resources.bulk import _json
from catalog.core.resources.record import (
    METADATA_FIELDS,
    ResourceRecord,
    content_digest,
    effective_annotations,
    snapshot_of,
)
from catalog.core.resources.writer import WRITTEN, Key, apply_sql, differs, staged_row
from catalog.core.resources.writes import check_directory, check_precondition, text_size

WHEN = datetime(2026, 7, 28, 12, 0, tzinfo=UTC)


def values(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uri": "file:///docs/a.txt",
        "name": "a.txt",
        "title": None,
        "description": "the first",
        "mime_type": "text/plain",
        "icons": None,
        "annotations": {"priority": 0.5},
        "tags": ("b", "a"),
        "consent_message": None,
        "ttl_ms": None,
        "meta": {"com.example/k": 1},
        "text": "hello",
        "blob_sha256": None,
        "size": 5,
    }
    row.update(changes)
    return row


def record(**changes: Any) -> ResourceRecord:
    fields = values(**changes)
    return ResourceRecord(
        uri=fields["uri"],
        name=fields["name"],
        title=fields["title"],
        description=fields["description"],
        mime_type=fields["mime_type"],
        size=fields["size"],
        icons=fields["icons"],
        annotations=fields["annotations"],
        meta=fields["meta"],
        content_changed_at=WHEN,
        id=41,
        tenant_id=2,
        tags=tuple(fields["tags"]),
        consent_message=fields["consent_message"],
        ttl_ms=fields["ttl_ms"],
        blob_sha256=fields["blob_sha256"],
        version=3,
        created_at=WHEN,
        updated_at=WHEN,
        text=fields["text"],
    )


# -- what a write sets and stages -------------------------------------------------------------------


def test_a_write_sets_the_metadata_then_the_content_uri_first() -> None:
    assert (*METADATA_FIELDS, "text", "blob_sha256", "size") == WRITTEN
    assert WRITTEN[0] == "uri"


def test_a_staged_row_keeps_only_the_written_columns() -> None:
    staged = staged_row({**values(), "id": 99, "version": 7, "unrelated": "x"})
    assert tuple(staged.values) == WRITTEN
    assert (staged.id, staged.before) == (None, None)


def test_the_snapshot_is_camel_case_metadata_without_nulls_or_content() -> None:
    assert snapshot_of(values()) == {
        "uri": "file:///docs/a.txt",
        "name": "a.txt",
        "description": "the first",
        "mimeType": "text/plain",
        "size": 5,
        "annotations": {"priority": 0.5},
        "tags": ["b", "a"],
        "_meta": {"com.example/k": 1},
    }
    assert staged_row(values()).snapshot == snapshot_of(values())


def test_the_audit_digest_covers_metadata_and_the_contents_sha256() -> None:
    staged = staged_row(values())
    text_sha256 = hashlib.sha256(b"hello").hexdigest()
    assert staged.digest == content_digest(snapshot_of(values()), text_sha256, None)
    assert staged.digest == digest({"meta": snapshot_of(values()), "text": text_sha256, "blob": None})
    assert re.fullmatch(r"[0-9a-f]{64}", staged.digest or "")


def test_the_digest_changes_with_content_and_with_metadata_but_not_with_key_order() -> None:
    base = staged_row(values()).digest
    assert staged_row(values(text="hello!")).digest != base
    assert staged_row(values(description="another")).digest != base
    assert staged_row(values(tags=("a", "b"))).digest != base  # tag order is kept, so it counts
    reordered = dict(reversed(list(values().items())))
    assert staged_row(reordered).digest == base


def test_text_and_a_blob_with_the_same_sha256_digest_differently() -> None:
    sha = hashlib.sha256(b"hello").hexdigest()
    as_text = staged_row(values(text="hello", blob_sha256=None)).digest
    as_blob = staged_row(values(text=None, blob_sha256=sha)).digest
    assert as_text != as_blob


def test_a_row_and_its_staged_write_have_one_digest() -> None:
    """The audit chain: an update's ``before`` digest is the digest the previous write recorded
    as ``after``, so the history of digests links up."""
    current = record()
    assert current.digest() == staged_row(values()).digest
    update = staged_row(values(text="new"), replaces=current)
    assert (update.id, update.before) == (41, current.digest())


@given(text=st.text(max_size=50), description=st.none() | st.text(max_size=20))
def test_identical_values_stage_identical_rows(text: str, description: str | None) -> None:
    """The no-op test compares values; staging is a function of them alone."""
    first = staged_row(values(text=text, description=description, size=len(text.encode())))
    second = staged_row(values(text=text, description=description, size=len(text.encode())))
    assert first == second


def test_a_record_knows_its_etag_and_whether_it_is_a_directory() -> None:
    assert record().etag == '"41.3"'
    assert not record().is_directory
    assert record(mime_type="inode/directory", text=None, size=None).is_directory


# -- the statement: no-op test and version bump ---------------------------------------------------


def test_the_no_op_test_compares_every_written_column_null_safely() -> None:
    clause = differs("s")
    assert clause == (
        "("
        + ", ".join(f"r.{c}" for c in WRITTEN)
        + ") IS DISTINCT FROM ("
        + ", ".join(f"s.{c}" for c in WRITTEN)
        + ")"
    )


@pytest.mark.parametrize("key", list(Key))
def test_every_write_bumps_the_version_only_past_the_no_op_test(key: Key) -> None:
    statement = apply_sql("source_rows", key=key)
    if key is Key.NEW:
        # A create writes version 1 (the column default) and never replaces a row.
        assert "ON CONFLICT (tenant_id, uri) DO NOTHING" in statement
        assert "r.version + 1" not in statement
        return
    assert "version = r.version + 1" in statement
    assert "updated_at = now()" in statement
    assert ("excluded" if key is Key.URI else "s") in statement.split("IS DISTINCT FROM")[1][:200]
    assert statement.count("IS DISTINCT FROM") == 2  # the no-op test, and content_changed_at


def test_content_changed_at_moves_only_when_text_or_blob_changed() -> None:
    statement = apply_sql("source_rows", key=Key.ID)
    assert (
        "content_changed_at = CASE WHEN (r.text, r.blob_sha256) IS DISTINCT FROM (s.text, s.blob_sha256)"
        " THEN now() ELSE r.content_changed_at END"
    ) in statement


def test_one_statement_writes_the_row_its_version_and_its_audit_entry() -> None:
    statement = apply_sql("source_rows", key=Key.URI, before="before_rows", returning=True)
    assert statement.startswith("WITH up AS (INSERT INTO resources AS r")
    assert "INSERT INTO resource_versions (" in statement
    assert "INSERT INTO audit_log (" in statement
    assert "ORDER BY s.uri" in statement  # URI order: concurrent writers cannot deadlock
    assert "LEFT JOIN before_rows AS b ON b.id = w.id" in statement
    assert "CASE WHEN w.created THEN 'resource.create' ELSE $3::text END" in statement


# -- checks before the statement --------------------------------------------------------------------


@pytest.mark.parametrize(
    "if_match",
    [None, "*", '"41.3"', 'W/"41.3"', '"1.1", "41.3"', ' "9.9" ,W/"41.3" ', '"1.1", *'],
)
def test_a_precondition_naming_the_current_etag_passes(if_match: str | None) -> None:
    check_precondition(record(), if_match)


@pytest.mark.parametrize("if_match", ['"41.2"', '"41.3', "41.3", '"1.1", "2.2"', ""])
def test_a_precondition_naming_another_version_fails_with_412(if_match: str) -> None:
    with pytest.raises(PreconditionFailed) as failed:
        check_precondition(record(), if_match)
    assert failed.value.status == 412
    assert failed.value.detail == f'the resource is at "41.3", not {if_match}'


def test_a_directory_has_no_content() -> None:
    """RES-21: ``inode/directory`` names a non-regular file; it holds neither text nor a blob."""
    check_directory("inode/directory", None, None)
    check_directory("text/plain", "x", None)
    for text, blob in (("x", None), (None, "ab" * 32), ("", None)):
        with pytest.raises(InvalidInput) as refused:
            check_directory("inode/directory", text, blob)
        assert [e.pointer for e in refused.value.errors] == ["/mimeType"]


def test_text_size_is_its_utf8_byte_count_within_the_limit() -> None:
    """RES-9: ``size`` is the byte length of the raw content (UTF-8 for text)."""
    assert text_size("", 10) == 0
    assert text_size("héllo", 10) == 6
    assert text_size("€" * 3, 9) == 9
    with pytest.raises(TooLarge) as refused:
        text_size("€" * 4, 9)
    assert refused.value.status == 413
    assert [(e.pointer, e.detail) for e in refused.value.errors] == [
        ("/text", "12 bytes of UTF-8; at most 9")
    ]


def test_last_modified_defaults_to_the_last_content_change() -> None:
    """RES-26: ``lastModified`` is ISO 8601; a curator's own value wins."""
    assert effective_annotations(None, WHEN) == {"lastModified": "2026-07-28T12:00:00Z"}
    assert effective_annotations({"priority": 1}, WHEN) == {
        "priority": 1,
        "lastModified": "2026-07-28T12:00:00Z",
    }
    assert effective_annotations({"lastModified": "2020-01-01T00:00:00Z"}, WHEN) == {
        "lastModified": "2020-01-01T00:00:00Z"
    }


# JSON as the set-based import stages it (``bulk._json``, orjson with a json.dumps fallback): any
# value a validated body can hold -- no NaN or Infinity, no NUL or unpaired surrogate -- reads back
# as the same value the standard library's text does, so the jsonb stored is the same.
_STORABLE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _STORABLE_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_STORABLE_TEXT, children, max_size=4),
    max_leaves=12,
)


@given(_JSON_VALUES)
def test_staged_json_reads_back_as_the_standard_librarys_text_does(value: Any) -> None:
    staged = _json(value)
    assert json.loads(staged) == json.loads(json.dumps(value)) == value


def test_staged_json_of_an_integer_beyond_64_bits_is_the_standard_librarys() -> None:
    assert _json({"n": 2**70}) == '{"n":1180591620717411303424}'
    assert _json(None) == "null"
    assert _json({"é": "ü"}) == '{"é":"ü"}'
