"""Reading JSON from untrusted bytes: a body, or one line of a file (``catalog import``, ``restore``).

The rules shared by every reader, so a hostile input costs a bounded amount of memory and never a
traceback: a line is read with a bounded ``readline`` (one without a newline, in a decompression bomb,
cannot grow past the limit), its nesting is scanned before any parser could recurse, and every way
the parser can refuse it (not UTF-8, bad JSON, a number of more digits than Python converts) is one
plain reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, Any

MAX_JSON_DEPTH = 64
# What a line holds besides its content: the metadata (descriptions, icons, _meta) of one resource.
LINE_OVERHEAD_BYTES = 1024 * 1024
# JSON escapes one byte of a text as at most six (``\u0001``): the longest line a text of the
# content limit can take, so whatever ``catalog export`` or ``catalog backup`` wrote reads back.
_ESCAPED = 6
_SKIP_READ = 64 * 1024  # the rest of a line too long is skipped this many bytes at a time

# A JSON string (skipped whole, escapes included) or one bracket; everything else is irrelevant.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def json_depth_exceeds(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``body`` nests arrays/objects deeper than ``limit`` (brackets inside strings ignored).

    Not a validator: malformed JSON is left to the parser, which refuses it properly.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # cannot be deeper than the number of openers (the common, cheap case)
    depth = 0
    for match in _TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth = max(depth - 1, 0)
    return False


def max_line_bytes(max_blob_bytes: int) -> int:
    """The longest line a JSONL import or a backup may have, from ``CATALOG_MAX_BLOB_BYTES``: a text
    of that many bytes fully escaped (a blob's base64 is shorter), plus the metadata around it."""
    return _ESCAPED * max_blob_bytes + LINE_OVERHEAD_BYTES


def too_long(limit: int) -> str:
    return f"a line longer than {limit} bytes (the limit follows CATALOG_MAX_BLOB_BYTES)"


def read_line(stream: IO[bytes], limit: int) -> bytes | None:
    """The next line of ``stream`` (with its newline; ``b""`` at the end), reading at most
    ``limit + 1`` bytes; None when the line is longer than ``limit`` (it is not read further)."""
    raw = stream.readline(limit + 1)
    if len(raw) > limit:
        return None
    return raw


def bounded_lines(stream: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | None, int]]:
    """``(number, raw, bytes)`` for each line; ``raw`` is None for a line longer than ``limit``,
    whose rest is skipped a bounded piece at a time (``bytes`` counts all of it, for progress)."""
    number = 0
    while True:
        raw = read_line(stream, limit)
        number += 1
        if raw is None:
            skipped = limit + 1
            while True:
                piece = stream.readline(_SKIP_READ)
                skipped += len(piece)
                if not piece or piece.endswith(b"\n"):
                    break
            yield number, None, skipped
            continue
        if not raw:
            return
        yield number, raw, len(raw)


class BadJson(ValueError):
    """A line or body that is not the JSON it should be; the message is one line."""


def parse_json(raw: bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """``raw`` parsed, or :class:`BadJson` saying why not (in one line)."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJson(f"not UTF-8 (byte {exc.start + 1})") from None
    if json_depth_exceeds(raw, limit):
        raise BadJson(f"nested deeper than {limit} levels")
    try:
        return json.loads(decoded)
    except json.JSONDecodeError as exc:
        raise BadJson(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except ValueError:  # an integer of more digits than int() converts (sys.get_int_max_str_digits)
        raise BadJson("a number is too large") from None
