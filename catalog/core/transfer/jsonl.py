"""JSONL sources: a file of admin-API resource bodies, one a line, read with a bounded line length."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import IO

from pydantic import ValidationError

from catalog.core.jsonlines import BadJson, bounded_lines, max_line_bytes, parse_json, too_long
from catalog.core.schemas.resources import ResourceIn
from catalog.core.transfer.items import Item, Problem, validation_reason


def jsonl_items(stream: IO[bytes], name: str, max_bytes: int) -> Iterator[Item | Problem]:
    """One item per non-blank line of admin-API resource objects; a bad line is a Problem.
    ``max_bytes``: CATALOG_MAX_BLOB_BYTES, which bounds a line (:func:`max_line_bytes`)."""
    for weight, lines in jsonl_chunks(stream, 1, max_line_bytes(max_bytes)):
        for number, raw in lines:
            item = jsonl_item(f"{name}:{number}", raw, max_bytes)
            yield dataclasses.replace(item, weight=weight)  # with the blank lines before it


def jsonl_chunks(
    stream: IO[bytes], size: int, limit: int
) -> Iterator[tuple[int, list[tuple[int, bytes | None]]]]:
    """The lines of ``stream`` as ``(number, raw)``, ``size`` non-blank ones at a time, each chunk
    with the bytes it covers (blank lines count towards the progress of the next line). A line
    longer than ``limit`` bytes is never held: its ``raw`` is None."""
    chunk: list[tuple[int, bytes | None]] = []
    weight = 0
    for number, raw, length in bounded_lines(stream, limit):
        weight += length
        if raw is not None and not raw.strip():
            continue
        chunk.append((number, raw))
        if len(chunk) >= size:
            yield weight, chunk
            chunk, weight = [], 0
    if chunk or weight:
        yield weight, chunk


def jsonl_item(location: str, raw: bytes | None, max_bytes: int) -> Item | Problem:
    """One line (None: one longer than the limit): an admin-API resource object, or the Problem."""
    if raw is None:
        return Problem(location, too_long(max_line_bytes(max_bytes)))
    weight = len(raw)
    try:
        data = parse_json(raw)
    except BadJson as exc:
        return Problem(location, str(exc), weight)
    if not isinstance(data, dict):
        return Problem(location, "a line must be a JSON object (an admin-API resource)", weight)
    try:
        body = ResourceIn.model_validate(data)
    except ValidationError as exc:
        return Problem(location, validation_reason(exc), weight)
    return Item(location, body, weight, size=len(raw))
