"""The rules for curator-supplied ``_meta`` (spec section 1.3, META-7, META-11), checked on write.

A resource's or template's ``_meta`` goes to clients as it is stored, so it is held to what the
protocol allows there:

* **Key names**: an optional prefix of dot-separated labels followed by ``/`` (each label starts
  with a letter, ends with a letter or digit, and has letters, digits and ``-`` between), then a
  name that is empty or starts and ends with a letter or digit (``-``, ``_``, ``.`` between).
* **Reserved prefixes** are refused (META-7: do not invent keys under them): any prefix whose
  second label is ``modelcontextprotocol`` or ``mcp`` (``io.modelcontextprotocol/``, ``dev.mcp/``,
  ``com.mcp.tools/``), and, because sessions of earlier revisions are served too, any prefix with
  such a label before its last one (the 2025-06-18 rule: ``modelcontextprotocol.io/``). Labels are
  DNS names, so compared without regard to case.
* **OpenTelemetry keys** ``traceparent``, ``tracestate`` and ``baggage``, the only unprefixed keys
  MCP reserves, must hold strings in the W3C formats (META-11): Trace Context level 2 and Baggage.
* The whole object is at most :data:`MAX_META_BYTES` as JSON.

Nested values are not looked into beyond the storable-JSON checks every body gets.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_META_BYTES = 65_536
RESERVED_LABELS = frozenset({"modelcontextprotocol", "mcp"})

_LABEL = re.compile(r"[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
_NAME = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)?")

# W3C Trace Context (level 2): version-traceid-parentid-flags, lowercase hex; version ff is invalid,
# all-zero ids are invalid, and version 00 has nothing after the flags.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?")
_TRACESTATE_KEY = re.compile(r"[a-z0-9][a-z0-9_\-*/@]{0,255}")
_TRACESTATE_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
MAX_TRACESTATE_MEMBERS = 32

# W3C Baggage: key = RFC 7230 token, value = baggage-octets, properties after ';'.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAGGAGE_VALUE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")
MAX_BAGGAGE_MEMBERS = 64
MAX_BAGGAGE_BYTES = 8192


def key_problem(key: str) -> str | None:
    """Why ``key`` may not be a ``_meta`` key a curator sets, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        labels = prefix.split(".")
        if not all(_LABEL.fullmatch(label) for label in labels):
            return (
                "the prefix must be dot-separated labels (a letter first, a letter or digit last, "
                "letters, digits and '-' between) followed by '/', e.g. com.example/"
            )
        lowered = [label.lower() for label in labels]
        if (len(lowered) > 1 and lowered[1] in RESERVED_LABELS) or RESERVED_LABELS.intersection(lowered[:-1]):
            return f"the prefix {prefix + '/'!r} is reserved for MCP; use your own reverse-DNS prefix"
    if not _NAME.fullmatch(name):
        return (
            "the name must start and end with a letter or digit, with letters, digits, "
            "'-', '_' and '.' between"
        )
    return None


def traceparent_problem(value: str) -> str | None:
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return "not a W3C traceparent (version-traceid-parentid-flags, lowercase hex)"
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == "ff":
        return "traceparent version ff is invalid"
    if version == "00" and rest:
        return "a version 00 traceparent ends after the flags"
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return "a traceparent trace-id or parent-id of all zeros is invalid"
    return None


def tracestate_problem(value: str) -> str | None:
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]  # empty list members are allowed
    if len(members) > MAX_TRACESTATE_MEMBERS:
        return f"a tracestate has at most {MAX_TRACESTATE_MEMBERS} list members"
    seen: set[str] = set()
    for member in members:
        key, equals, member_value = member.partition("=")
        if not equals or not _TRACESTATE_KEY.fullmatch(key) or not _TRACESTATE_VALUE.fullmatch(member_value):
            return f"not a W3C tracestate list member: {member[:64]!r} (key=value)"
        if key in seen:
            return f"the tracestate key {key!r} appears twice"
        seen.add(key)
    return None


def baggage_problem(value: str) -> str | None:
    if len(value.encode("utf-8", "surrogatepass")) > MAX_BAGGAGE_BYTES:
        return f"a baggage is at most {MAX_BAGGAGE_BYTES} bytes"
    members = value.split(",")
    if len(members) > MAX_BAGGAGE_MEMBERS:
        return f"a baggage has at most {MAX_BAGGAGE_MEMBERS} list members"
    for member in members:
        entry, *properties = member.split(";")
        key, equals, member_value = entry.partition("=")
        if not equals or not _TOKEN.fullmatch(key.strip(" \t")):
            return f"not a W3C baggage list member: {member[:64]!r} (key=value)"
        if not _BAGGAGE_VALUE.fullmatch(member_value.strip(" \t")):
            return f"the baggage value of {key.strip()!r} has characters outside the W3C baggage-octets"
        for prop in properties:
            prop_key, prop_equals, prop_value = prop.partition("=")
            if not _TOKEN.fullmatch(prop_key.strip(" \t")) or (
                prop_equals and not _BAGGAGE_VALUE.fullmatch(prop_value.strip(" \t"))
            ):
                return f"not a W3C baggage property: {prop[:64]!r}"
    return None


_VALUE_RULES = {
    "traceparent": traceparent_problem,
    "tracestate": tracestate_problem,
    "baggage": baggage_problem,
}


def meta_problem(meta: dict[str, Any]) -> tuple[str, str] | None:
    """The first thing wrong with a curator's ``_meta``: (the key at fault, or "" for the whole
    object; the reason), or None."""
    size = len(json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > MAX_META_BYTES:
        return "", f"_meta is at most {MAX_META_BYTES} bytes as JSON (this one is {size})"
    for key, value in meta.items():
        reason = key_problem(key)
        if reason is None and key in _VALUE_RULES:
            reason = (
                _VALUE_RULES[key](value) if isinstance(value, str) else f"{key} must be a string (W3C format)"
            )
        if reason is not None:
            return key, reason
    return None
