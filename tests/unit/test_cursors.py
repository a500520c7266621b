"""Signed keyset cursors (catalog/core/cursors.py), without a database.

A cursor names a position, the listing it belongs to and the fingerprint of the caller's standing;
its MAC keeps it from being forged, edited or carried to another listing or caller (PAG-5: an
invalid cursor is refused, never a fault), and nothing in it depends on the process that minted it,
so any worker holding the secret continues it (PAG-6).
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import create_async_engine

from catalog.core import cursors
from catalog.core.catalog import Catalog
from catalog.core.cursors import CursorPosition, InvalidCursor, decode_cursor, encode_cursor
from catalog.core.errors import InvalidInput
from catalog.core.principal import Principal
from catalog.core.resources.paging import cursor_after, page_of, page_start
from catalog.core.resources.repository import ListingFilter
from catalog.core.visibility import principal_fingerprint, visibility_of_grants
from catalog.settings import Settings

KEY = b"unit-test-cursor-key-0123456789abcdef"
OTHER_KEY = b"another-deployment-key-0123456789abc"
FINGERPRINT = "0123456789abcdef"

positions = st.one_of(st.text(max_size=300), st.integers(min_value=-(2**63), max_value=2**63 - 1))
names = st.text(min_size=1, max_size=60)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@given(after=positions, listing=names, fingerprint=names)
def test_a_cursor_decodes_to_the_position_it_was_minted_for(
    after: str | int, listing: str, fingerprint: str
) -> None:
    """PAG-6: the position travels in the cursor itself (any process with the key continues it)."""
    cursor = encode_cursor(KEY, after=after, listing=listing, fingerprint=fingerprint)
    assert decode_cursor(KEY, cursor, listing=listing, fingerprint=fingerprint) == CursorPosition(
        after=after, listing=listing, fingerprint=fingerprint
    )


@given(after=positions)
def test_the_same_position_always_gives_the_same_cursor(after: str | int) -> None:
    """PAG-4: re-requesting a page while nothing changes gives the same cursor, byte for byte."""
    first = encode_cursor(KEY, after=after, listing="resources", fingerprint=FINGERPRINT)
    assert first == encode_cursor(KEY, after=after, listing="resources", fingerprint=FINGERPRINT)
    assert first != "", "PAG-3: a cursor is never the empty string"


def test_a_cursor_is_url_safe_text_with_one_dot() -> None:
    cursor = encode_cursor(KEY, after="file:///a b/ü?x=1#y", listing="resources", fingerprint=FINGERPRINT)
    body, mac = cursor.split(".")
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
    assert json.loads(_unb64(body)) == {
        "v": 1,
        "a": "file:///a b/ü?x=1#y",
        "l": "resources",
        "f": FINGERPRINT,
    }
    assert len(_unb64(mac)) == 18


@given(after=positions, index=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_any_changed_byte_of_a_cursor_is_refused(after: str | int, index: int, flip: int) -> None:
    """PAG-5: a tampered cursor (body or MAC) is ``InvalidCursor``, an invalid-params error."""
    cursor = encode_cursor(KEY, after=after, listing="resources", fingerprint=FINGERPRINT)
    raw = bytearray(cursor.encode())
    position = index % len(raw)
    raw[position] ^= flip
    try:
        tampered = raw.decode()
    except UnicodeDecodeError:
        return  # not text: nothing a JSON-RPC string could carry
    if tampered == cursor:
        return
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, tampered, listing="resources", fingerprint=FINGERPRINT)


def test_a_forged_body_with_the_old_mac_is_refused() -> None:
    """Moving the position by rewriting the body (keeping the MAC) does not pass the MAC check."""
    cursor = encode_cursor(KEY, after="file:///b", listing="resources", fingerprint=FINGERPRINT)
    _, mac = cursor.split(".")
    forged_body = json.dumps(
        {"v": 1, "a": "file:///z", "l": "resources", "f": FINGERPRINT}, separators=(",", ":")
    )
    with pytest.raises(InvalidCursor):
        decode_cursor(
            KEY, f"{_b64(forged_body.encode())}.{mac}", listing="resources", fingerprint=FINGERPRINT
        )


def test_a_cursor_minted_with_another_key_is_refused() -> None:
    cursor = encode_cursor(OTHER_KEY, after="file:///b", listing="resources", fingerprint=FINGERPRINT)
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, cursor, listing="resources", fingerprint=FINGERPRINT)


def test_a_cursor_of_another_listing_is_refused() -> None:
    cursor = encode_cursor(KEY, after="file:///b", listing="resources", fingerprint=FINGERPRINT)
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, cursor, listing="templates", fingerprint=FINGERPRINT)


def test_a_cursor_of_another_standing_is_refused() -> None:
    cursor = encode_cursor(KEY, after="file:///b", listing="resources", fingerprint=FINGERPRINT)
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, cursor, listing="resources", fingerprint="fedcba9876543210")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "garbage",
        "a.b.c",
        ".",
        "!!!.???",
        "x" * 8193,
    ],
    ids=["empty", "garbage", "three-parts", "only-dot", "not-base64", "over-long"],
)
def test_malformed_cursors_are_invalid_input(cursor: str) -> None:
    """PAG-5: ``cursor: "garbage"`` and its kin are refused as invalid input, never a fault."""
    with pytest.raises(InvalidCursor) as refused:
        decode_cursor(KEY, cursor, listing="resources", fingerprint=FINGERPRINT)
    assert isinstance(refused.value, InvalidInput)
    assert str(refused.value) == "the cursor is invalid, expired or not yours"


def test_a_non_string_cursor_is_refused() -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, 12345, listing="resources", fingerprint=FINGERPRINT)  # type: ignore[arg-type]


def _signed(payload: object) -> str:
    """A cursor whose MAC is right for ``payload``: the checks after the MAC, taken one by one."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    # Signed by the module's own MAC, so the refusal tested is the one after the MAC check.
    return f"{_b64(body)}.{_b64(cursors._mac(KEY, body))}"


def test_a_cursor_of_another_version_says_to_start_again() -> None:
    with pytest.raises(InvalidCursor, match="another version of the server"):
        decode_cursor(KEY, _signed({"v": 2, "a": "x", "l": "l", "f": "f"}), listing="l", fingerprint="f")


@pytest.mark.parametrize("after", [None, 1.5, ["x"], {"k": 1}, True])
def test_a_signed_cursor_whose_position_is_no_key_is_refused(after: object) -> None:
    """Only a string or an integer is a keyset position (``True`` is an int to Python, and passes)."""
    cursor = _signed({"v": 1, "a": after, "l": "l", "f": "f"})
    if after is True:
        assert decode_cursor(KEY, cursor, listing="l", fingerprint="f").after is True
        return
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, cursor, listing="l", fingerprint="f")


def test_a_signed_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, _signed(["v", 1]), listing="l", fingerprint="f")


def test_cursors_carry_no_expiry() -> None:
    """No time is in a cursor: it stays valid until the key, the listing or the standing changes
    (PAG-8: the client starts again from the first page when one is refused)."""
    cursor = encode_cursor(KEY, after="file:///b", listing="resources", fingerprint=FINGERPRINT)
    assert set(json.loads(_unb64(cursor.split(".")[0]))) == {"v", "a", "l", "f"}


# -- bound to the caller's standing: tenant, kind, admin flag, scopes ----------------------------


def _catalog() -> Catalog:
    # The engine is never connected: paging only signs and checks cursors.
    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
    return Catalog(engine=engine, settings=Settings(secret_key=KEY.decode()))


def _token(tenant: int, *scopes: str, admin: bool = False) -> Principal:
    return Principal(
        kind="token",
        tenant_id=tenant,
        tenant_slug=f"t{tenant}",
        scopes=frozenset(scopes),
        is_admin=admin,
        token_id=tenant * 100,
    )


def test_a_page_cursor_continues_for_the_same_standing_and_not_for_another() -> None:
    """RES-7 with PAG-6: a cursor is bound to what the caller sees, not to the credential: another
    token with the same scopes continues it, a caller who sees another set is refused."""
    catalog = _catalog()
    reader = _token(1, "reader")
    same_standing = Principal(
        kind="token", tenant_id=1, tenant_slug="t1", scopes=frozenset({"reader"}), token_id=999
    )
    visibility = visibility_of_grants(reader, 1, prefixes=["file:///a/"])
    cursor = cursor_after(catalog, visibility, "file:///a/3", listing="resources")
    assert page_start(catalog, visibility, listing="resources", cursor=cursor) == "file:///a/3"
    assert (
        page_start(
            catalog,
            visibility_of_grants(same_standing, 1, prefixes=["file:///a/"]),
            listing="resources",
            cursor=cursor,
        )
        == "file:///a/3"
    )
    refused = [
        _token(2, "reader"),  # another tenant
        _token(1, "reader", "writer"),  # more scopes
        _token(1),  # no scopes
        _token(1, "reader", admin=True),  # the tenant's admin
        Principal.anonymous(1, "t1"),  # another kind
        Principal.platform_admin(),
    ]
    for other in refused:
        # Each lists the tenant it belongs to (the platform admin: tenant 1).
        own = visibility_of_grants(other, other.tenant_id or 1)
        with pytest.raises(InvalidCursor):
            page_start(catalog, own, listing="resources", cursor=cursor)


def test_a_page_cursor_is_bound_to_the_listing_filters() -> None:
    catalog = _catalog()
    visibility = visibility_of_grants(_token(1, "reader"), 1, prefixes=["file:///"])
    tagged = ListingFilter(tag="x")
    cursor = cursor_after(catalog, visibility, "file:///m", listing="resources", filters=tagged)
    assert page_start(catalog, visibility, listing="resources", cursor=cursor, filters=tagged) == "file:///m"
    with pytest.raises(InvalidCursor):
        page_start(catalog, visibility, listing="resources", cursor=cursor)
    with pytest.raises(InvalidCursor):
        page_start(catalog, visibility, listing="resources", cursor=cursor, filters=ListingFilter(tag="y"))


def test_no_cursor_starts_at_the_beginning() -> None:
    catalog = _catalog()
    visibility = visibility_of_grants(_token(1, "reader"), 1)
    assert page_start(catalog, visibility, listing="resources", cursor=None) is None
    assert page_start(catalog, visibility, listing="resources", cursor="") is None


def test_a_page_has_a_next_cursor_only_when_more_rows_were_read() -> None:
    """PAG-2: the last page carries no ``nextCursor``; a page of ``limit`` from ``limit + 1`` rows
    carries the cursor after its last row."""
    catalog = _catalog()
    visibility = visibility_of_grants(_token(1, "reader"), 1)
    rows = ["file:///1", "file:///2", "file:///3"]
    page, cursor = page_of(catalog, visibility, rows, listing="resources", limit=3, uri_of=str)
    assert (page, cursor) == (rows, None)
    page, cursor = page_of(catalog, visibility, rows, listing="resources", limit=2, uri_of=str)
    assert page == rows[:2]
    assert cursor is not None
    assert page_start(catalog, visibility, listing="resources", cursor=cursor) == "file:///2"


def test_fingerprints_differ_exactly_when_standing_differs() -> None:
    """The fingerprint names the standing (tenant, kind, admin, scopes), not the credential."""
    base = principal_fingerprint(_token(1, "a", "b"), 1)
    assert (
        principal_fingerprint(
            Principal(kind="token", tenant_id=1, scopes=frozenset({"b", "a"}), token_id=7, subject="x"), 1
        )
        == base
    )
    assert len(base) == 16
    assert principal_fingerprint(_token(2, "a", "b"), 2) != base
    assert principal_fingerprint(_token(1, "a"), 1) != base
    assert principal_fingerprint(_token(1, "a", "b", admin=True), 1) != base
    assert principal_fingerprint(Principal(kind="jwt", tenant_id=1, scopes=frozenset({"a", "b"})), 1) != base


def test_a_caller_of_another_tenant_sees_nothing_whatever_its_fingerprint() -> None:
    """The fingerprint is of the standing asked about (tenant, kind, admin, scopes); a caller of
    tenant 2 asking about tenant 1 shares a tenant-1 reader's fingerprint, and that is harmless:
    its visibility there is nothing, so a cursor it carries can only open an empty page."""
    foreign = _token(2, "a", "b")
    assert principal_fingerprint(foreign, 1) == principal_fingerprint(_token(1, "a", "b"), 1)
    seen = visibility_of_grants(foreign, 1, uris=["file:///x"], prefixes=["file:///"], tags=["t"])
    assert seen.nothing
    assert not seen.allows("file:///x", ("t",))


def test_a_cursor_spelt_otherwise_with_the_same_bytes_is_refused_pag_5() -> None:
    """PAG-5: where the body's length leaves unused low bits in its last base64 character,
    changing them changes no decoded byte, yet that spelling is not the cursor the server gave:
    refused, so any changed character of a cursor is refused."""
    for after in ("file:///b", "file:///bb", "file:///bbb"):
        cursor = encode_cursor(KEY, after=after, listing="resources", fingerprint=FINGERPRINT)
        body_part, mac_part = cursor.split(".")
        if len(body_part) % 4:
            break
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    respelt = body_part[:-1] + alphabet[alphabet.index(body_part[-1]) ^ 1]
    padded = "=" * (-len(body_part) % 4)
    assert base64.urlsafe_b64decode(respelt + padded) == base64.urlsafe_b64decode(body_part + padded)
    with pytest.raises(InvalidCursor):
        decode_cursor(KEY, f"{respelt}.{mac_part}", listing="resources", fingerprint=FINGERPRINT)
