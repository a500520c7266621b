"""Signed keyset cursors: the one way every listing pages.

A cursor names the last key of the previous page, the listing it belongs to and the fingerprint of
the caller's visibility; an HMAC (``CATALOG_SECRET_KEY``) keeps it from being forged or moved to
another caller or listing. Any worker or host with the shared secret can continue any cursor.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

from catalog.core.errors import InvalidInput

_VERSION = 1
_MAX_CURSOR_LENGTH = 8192


class InvalidCursor(InvalidInput):
    def __init__(self, detail: str = "the cursor is invalid, expired or not yours") -> None:
        super().__init__(detail)


@dataclass(frozen=True)
class CursorPosition:
    after: str | int
    listing: str
    fingerprint: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    """The bytes ``text`` spells, only if :func:`_b64` spells them so: a cursor has one spelling, so
    a changed character (unused low bits of the last one, padding, characters outside the
    alphabet that the decoder skips) never passes as the same cursor."""
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not the canonical spelling")
    return data


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, b"catalog-cursor\x00" + body, hashlib.sha256).digest()[:18]


def encode_cursor(key: bytes, *, after: str | int, listing: str, fingerprint: str) -> str:
    body = json.dumps(
        {"v": _VERSION, "a": after, "l": listing, "f": fingerprint}, separators=(",", ":"), ensure_ascii=False
    ).encode()
    return f"{_b64(body)}.{_b64(_mac(key, body))}"


def decode_cursor(key: bytes, cursor: str, *, listing: str, fingerprint: str) -> CursorPosition:
    """The position a cursor names; ``InvalidCursor`` if damaged, forged, foreign or of another listing."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR_LENGTH:
        raise InvalidCursor()
    try:
        body_part, mac_part = cursor.split(".")
        body = _unb64(body_part)
        mac = _unb64(mac_part)
    except (ValueError, TypeError):
        raise InvalidCursor() from None
    if not hmac.compare_digest(mac, _mac(key, body)):
        raise InvalidCursor()
    try:
        payload = json.loads(body)
    except ValueError:
        raise InvalidCursor() from None
    if not isinstance(payload, dict) or payload.get("v") != _VERSION:
        raise InvalidCursor("the cursor is from another version of the server; start the listing again")
    after = payload.get("a")
    if payload.get("l") != listing or payload.get("f") != fingerprint or not isinstance(after, str | int):
        raise InvalidCursor()
    return CursorPosition(after=after, listing=listing, fingerprint=fingerprint)
