"""Template bodies: ``{var}`` placeholders, checked when a template is saved and rendered with the
matched values, escaped for the body's media type."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import Final, Literal

from catalog.core.uri_templates.parsing import LONE_SURROGATE, InvalidTemplate

BodyEscaping = Literal["json", "markup", "none"]

_PLACEHOLDER: Final = re.compile(r"\{([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)\}")
_ESCAPED_PLACEHOLDER: Final = re.compile(r"\{(\{[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*\})\}")
_XML_ILLEGAL: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@lru_cache(maxsize=512)
def _parse_body(body: str) -> tuple[tuple[str, str | None], ...]:
    """Split a body into ``(literal, placeholder-or-None)`` pairs."""
    pieces: list[tuple[str, str | None]] = []
    literal: list[str] = []
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch != "{":
            j = body.find("{", i)
            j = n if j == -1 else j
            literal.append(body[i:j])
            i = j
            continue
        escaped = _ESCAPED_PLACEHOLDER.match(body, i)
        if escaped is not None:
            literal.append(escaped.group(1))  # {{name}} is the literal text {name}
            i = escaped.end()
            continue
        placeholder = _PLACEHOLDER.match(body, i)
        if placeholder is None:
            # Not a placeholder: a brace of the body's own syntax (JSON, CSS, ...), kept as written.
            literal.append(ch)
            i += 1
            continue
        name = placeholder.group(1)
        close = placeholder.end() - 1
        pieces.append(("".join(literal), name))
        literal = []
        i = close + 1
    pieces.append(("".join(literal), None))
    return tuple(pieces)


def validate_body(body: str, variable_names: Collection[str]) -> None:
    """Refuse a malformed body or a placeholder that is not one of ``variable_names``."""
    known = set(variable_names)
    for _, name in _parse_body(body):
        if name is not None and name not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise InvalidTemplate(
                f"unknown placeholder {{{name}}} in the body; the variables are: {listed}", body
            )


def body_escaping(mime_type: str | None) -> BodyEscaping:
    """How values are escaped in a body of ``mime_type`` (parameters and case ignored)."""
    base = (mime_type or "").split(";", 1)[0].strip().lower()
    if base == "application/json" or base.endswith("+json"):
        return "json"
    if base in ("text/html", "text/xml", "application/xml") or base.endswith("+xml"):
        return "markup"
    return "none"


def _escape(value: str, escaping: BodyEscaping) -> str:
    value = LONE_SURROGATE.sub("\ufffd", value)
    if escaping == "json":
        quoted = json.dumps(value, ensure_ascii=False)[1:-1]
        return quoted.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    if escaping == "markup":
        return html.escape(_XML_ILLEGAL.sub("\ufffd", value), quote=True)
    return value


def render_body(body: str, variables: Mapping[str, str], mime_type: str | None) -> str:
    """Render a template body with the matched ``variables``, escaped for ``mime_type``.

    Raises :class:`InvalidTemplate` only for a malformed body, never because of a value.
    """
    escaping = body_escaping(mime_type)
    out: list[str] = []
    for literal, name in _parse_body(body):
        out.append(literal)
        if name is not None:
            out.append(_escape(variables.get(name, ""), escaping))
    return "".join(out)
