"""The one place for resource-template rules: RFC 6570 parsing, matching, bodies and completion.

Parsing, expansion and matching are the MCP SDK's :class:`mcp.shared.uri_template.UriTemplate`; this
module adds the catalogue's rules on top and never parses RFC 6570 expressions itself.

Decisions
---------
* **Accepted templates** (:func:`parse_template`): RFC 6570 as the SDK supports it (levels 1-3, no
  ``{var:N}``); at most 2048 bytes of UTF-8; no control, format or whitespace characters; the literal
  text before the first expression must be a valid, *canonical* URI prefix with a scheme
  (``test://template/``; ``Test://x/{id}`` is refused with the canonical spelling in the message),
  and a sample expansion must already be a canonical URI (so ``file:///a/../{x}`` or
  ``file:///a//{x}`` are refused: stored and requested URIs are canonical, such a template could
  never match).  Explode modifiers (``{/path*}``) are refused so every variable binds one string; use
  ``{+path}`` for multi-segment values.  Repeated variables are refused (by the SDK).
* **Matching** (:func:`match`) expects a canonical URI (:func:`catalog.core.uris.normalize_uri`);
  values come back percent-decoded.  Optional query variables (``{?q}``) absent from the URI are
  absent from the result.
* **Bodies** (:func:`render_body`) use the template's own variable names as ``{var}`` placeholders.
  A placeholder is ``{name}`` with ``name`` an RFC 6570 variable name, and it must be one of the
  template's variables (a typo is refused when the template is saved); every other brace is the
  body's own text, so a JSON body is written naturally: ``{"a": {"id": "{id}"}}``.  ``{{name}}``
  is the literal text ``{name}``, for the rare body that needs it (``${{HOME}}`` in a script).  Unknown
  placeholders are refused when the template is created (:func:`validate_body`); at render time a
  variable missing from the match (an absent optional query variable) renders as the empty string.
  Values are escaped for the body's mime type: JSON-string escaping (no surrounding quotes) for
  ``application/json`` and ``*/*+json``; HTML/XML escaping (``& < > " '``) for ``text/html``,
  ``text/xml``, ``application/xml`` and ``*/*+xml``, where characters XML 1.0 cannot carry become
  U+FFFD; verbatim otherwise.  Lone surrogates become U+FFFD in every mode, so a rendered body always
  encodes as UTF-8.  Rendering never fails because of a value.
* **Completion** (:func:`completion_candidates`): the SQL prefix is the template expanded, left to
  right, with the values already known (``context.arguments``) and then the partial value of the
  argument being completed; it stops at the first variable whose value is unknown, at the first
  query expression (``{?..}``/``{&..}``, matched in any order), and inside a value at the first
  character whose spelling in a canonical URI is not unique (anything but unreserved or non-ASCII
  characters: ``!`` and ``%21`` are different URIs that decode to the same value).  So completing
  ``{name}`` of ``file:///{dir}/{name}`` without ``dir`` in context scans all of ``file:///``; the
  ``extract`` function then checks the template match, agreement with every context value, and that
  the value starts with the partial one.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Final, Literal
from urllib.parse import unquote

from catalog.core.uris import (
    MAX_URI_BYTES,
    InvalidUri,
    check_uri_characters,
    normalize_uri,
    uri_prefix_upper_bound,
    validate_uri_prefix,
)

if TYPE_CHECKING:
    # Imported where a template is parsed: any ``mcp.*`` import runs the SDK's ``__init__`` (its
    # client and server, 0.4-0.8 s), which a command that never parses a template must not pay for.
    from mcp.shared.uri_template import UriTemplate

__all__ = [
    "MAX_TEMPLATE_BYTES",
    "BodyEscaping",
    "CompletionQuery",
    "InvalidTemplate",
    "ParsedTemplate",
    "body_escaping",
    "completion_candidates",
    "expand",
    "literal_prefix",
    "match",
    "parse_template",
    "render_body",
    "validate_body",
    "variable_names",
]

MAX_TEMPLATE_BYTES: Final = 2048

BodyEscaping = Literal["json", "markup", "none"]

_VARNAME_RE: Final = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")  # RFC 6570 §2.3 (no pct-encoded)
_UNIQUE_SPELLING: Final = re.compile(r"[A-Za-z0-9\-._~\u0080-\U0010ffff]*")
_PLACEHOLDER: Final = re.compile(r"\{([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)\}")
_ESCAPED_PLACEHOLDER: Final = re.compile(r"\{(\{[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*\})\}")
_XML_ILLEGAL: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class InvalidTemplate(ValueError):
    """A URI template, template body or completion request that the catalogue refuses.

    ``reason`` is a short human explanation; ``template`` is the offending input.
    """

    def __init__(self, reason: str, template: object) -> None:
        self.reason = reason
        self.template = template
        shown = template if not isinstance(template, str) or len(template) <= 120 else template[:117] + "..."
        super().__init__(f"invalid template {shown!r}: {reason}")


@dataclass(frozen=True)
class ParsedTemplate:
    """A validated template: the raw text, the SDK's parsed form and what the catalogue derives."""

    template: str
    uri_template: UriTemplate = field(repr=False, compare=False)
    literal_prefix: str
    variable_names: tuple[str, ...]
    query_variable_names: frozenset[str]
    # For a template of simple ``{name}`` expressions only: the SDK's match as one regular
    # expression (``simple_matcher``); None for any other template, which the SDK matches.
    simple: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def match(self, uri: str) -> dict[str, str] | None:
        return match(self, uri)

    def expand(self, variables: Mapping[str, str]) -> str:
        return expand(self, variables)


# --------------------------------------------------------------------------------------------------
# Templates


def parse_template(raw: str) -> ParsedTemplate:
    """Validate ``raw`` (see the module docstring) and return it parsed (cached: results are immutable)."""
    if not isinstance(raw, str):
        raise InvalidTemplate("not a string", raw)
    return _parse_template(raw)


@lru_cache(maxsize=1024)
def _parse_template(raw: str) -> ParsedTemplate:
    try:
        size = len(raw.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidTemplate("contains a lone surrogate", raw) from None
    if size > MAX_TEMPLATE_BYTES:
        raise InvalidTemplate(f"longer than {MAX_TEMPLATE_BYTES} bytes", raw)
    try:
        check_uri_characters(raw)
    except InvalidUri as exc:
        raise InvalidTemplate(exc.reason, raw) from None
    from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

    try:
        parsed = UriTemplate.parse(raw, max_length=MAX_TEMPLATE_BYTES)
    except InvalidUriTemplate as exc:
        raise InvalidTemplate(str(exc), raw) from None

    exploded = [v.name for v in parsed.variables if v.explode]
    if exploded:
        raise InvalidTemplate(
            f"explode modifiers are not supported (variable {exploded[0]!r}); use {{+var}} for several segments",
            raw,
        )
    for literal in _literals(raw):
        if "}" in literal:
            raise InvalidTemplate("'}' outside an expression", raw)

    brace = raw.find("{")
    prefix = raw if brace == -1 else raw[:brace]
    if not prefix:
        raise InvalidTemplate("the text before the first expression must begin with a scheme", raw)
    try:
        canonical_prefix = validate_uri_prefix(prefix)
    except InvalidUri as exc:
        raise InvalidTemplate(f"literal prefix {prefix!r}: {exc.reason}", raw) from None
    if canonical_prefix != prefix:
        raise InvalidTemplate(f"the literal prefix is not canonical; write {canonical_prefix!r}", raw)

    sample = parsed.expand(dict.fromkeys(parsed.variable_names, "v"))
    try:
        canonical_sample = normalize_uri(sample)
    except InvalidUri as exc:
        raise InvalidTemplate(f"its expansions are not valid URIs ({sample!r}: {exc.reason})", raw) from None
    if canonical_sample != sample:
        raise InvalidTemplate(
            f"its expansions are not canonical URIs ({sample!r} is stored as {canonical_sample!r})", raw
        )
    return ParsedTemplate(
        template=raw,
        uri_template=parsed,
        literal_prefix=prefix,
        variable_names=tuple(parsed.variable_names),
        query_variable_names=parsed.query_variable_names,
        simple=simple_matcher(raw),
    )


# What simple expansion leaves unencoded in a value is never one of these, so the SDK's scan stops a
# simple variable's value at them (its ``_STOP_CHARS[""]``).
_SIMPLE_STOPS = "/?#&,"
_SIMPLE_EXPRESSION = re.compile(r"\{([A-Za-z0-9_]+(?:,[A-Za-z0-9_]+)*)\}")


def simple_matcher(raw: str) -> re.Pattern[str] | None:
    """The SDK's ``UriTemplate.match`` for ``raw`` as a regular expression, when every expression
    of ``raw`` is simple (``{a}``, ``{a,b}``: no operator, no modifier) and names a variable once;
    else None.

    The SDK scans such a template right to left, each value up to the nearest occurrence of the
    literal before it and never across a stop character, which is what a sequence of greedy groups
    of non-stop characters does (the SDK says as much); the values are then percent-decoded the
    same way (``unquote``). ``tests/test_uri_templates.py`` checks the two agree on generated
    templates and URIs. It exists for completion, which matches every URI of a range (a directory
    of 400 rows) against one template: the SDK's scan was a third of that request's time.
    """
    pattern: list[str] = []
    names: set[str] = set()
    position = 0
    for expression in _SIMPLE_EXPRESSION.finditer(raw):
        literal = raw[position : expression.start()]
        if "{" in literal:
            return None  # an expression that is not simple
        pattern.append(re.escape(literal))
        variables = expression.group(1).split(",")
        if names.intersection(variables) or len(set(variables)) != len(variables):
            return None
        names.update(variables)
        group = f"([^{re.escape(_SIMPLE_STOPS)}]*)"
        pattern.append(",".join(group for _ in variables))
        position = expression.end()
    if "{" in raw[position:] or not names:
        return None
    pattern.append(re.escape(raw[position:]))
    return re.compile("".join(pattern), re.DOTALL)


def _coerce(template: ParsedTemplate | str) -> ParsedTemplate:
    return template if isinstance(template, ParsedTemplate) else parse_template(template)


def literal_prefix(template: ParsedTemplate | str) -> str:
    """The literal text before the first expression (the whole template if it has none)."""
    return _coerce(template).literal_prefix


def variable_names(template: ParsedTemplate | str) -> tuple[str, ...]:
    """The template's variable names, in order of appearance."""
    return _coerce(template).variable_names


def match(template: ParsedTemplate | str, uri: str) -> dict[str, str] | None:
    """The variables of canonical ``uri`` if it matches ``template``, else ``None``."""
    parsed = _coerce(template)
    if parsed.simple is not None:
        if len(uri) > MAX_URI_BYTES:
            return None
        found = parsed.simple.fullmatch(uri)
        if found is None:
            return None
        return dict(zip(parsed.variable_names, map(_unquoted, found.groups()), strict=True))
    result = parsed.uri_template.match(uri, max_uri_length=MAX_URI_BYTES)
    if result is None:
        return None
    return {name: value for name, value in result.items() if isinstance(value, str)}


def match_values(template: ParsedTemplate, uri: str, names: tuple[str, ...]) -> list[str | None] | None:
    """``match(template, uri)``'s values of ``names`` (None for one it has none for), else ``None``;
    for a simple template without making the whole mapping (completion matches a row at a time)."""
    if template.simple is None:
        found = match(template, uri)
        return None if found is None else [found.get(name) for name in names]
    return simple_values(template, uri, value_groups(template, names))


def value_groups(template: ParsedTemplate, names: tuple[str, ...]) -> tuple[int | None, ...]:
    """The match groups of ``names`` in a simple template (None for a name it lacks), for
    :func:`simple_values`."""
    groups = template.variable_names  # one group per variable, in order; the SDK refuses repeats
    return tuple(groups.index(name) + 1 if name in groups else None for name in names)


def simple_values(
    template: ParsedTemplate, uri: str, groups: tuple[int | None, ...]
) -> list[str | None] | None:
    """:func:`match_values` of a simple template, its names' groups (:func:`value_groups`) looked
    up beforehand: completion matches every row of a scan against the same names."""
    assert template.simple is not None
    if len(uri) > MAX_URI_BYTES:
        return None
    matched = template.simple.fullmatch(uri)
    if matched is None:
        return None
    return [None if group is None else _unquoted(matched.group(group)) for group in groups]


def _unquoted(text: str) -> str:
    return unquote(text) if "%" in text else text  # unquote's answer, without its call for most values


def expand(template: ParsedTemplate | str, variables: Mapping[str, str]) -> str:
    """Expand ``template``; the result is a canonical URI that :func:`match` maps back.

    Raises :class:`InvalidUri` if the expansion is refused (a value of ``..``) or is not canonical
    (a value of ``.``, which would be stored as a different URI that no longer matches).
    """
    raw = _coerce(template).uri_template.expand(variables)
    canonical = normalize_uri(raw)
    if canonical != raw:
        raise InvalidUri(f"the expansion is not canonical (it would be stored as {canonical!r})", raw)
    return raw


def _expressions(raw: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each ``{...}`` in a template the SDK accepted (literals hold no braces)."""
    spans: list[tuple[int, int]] = []
    i = raw.find("{")
    while i != -1:
        j = raw.index("}", i)
        spans.append((i, j + 1))
        i = raw.find("{", j)
    return spans


def _literals(raw: str) -> list[str]:
    out: list[str] = []
    pos = 0
    for start, end in _expressions(raw):
        out.append(raw[pos:start])
        pos = end
    out.append(raw[pos:])
    return out


# --------------------------------------------------------------------------------------------------
# Bodies


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
    value = _SURROGATE.sub("\ufffd", value)
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


# --------------------------------------------------------------------------------------------------
# Completion


@dataclass(frozen=True)
class CompletionQuery:
    """How to find completion values for one template argument.

    Select stored URIs with ``uri >= uri_prefix AND uri < upper_bound`` (no upper bound when ``None``)
    and keep ``extract(uri)`` of each one that is not ``None``.
    """

    template: ParsedTemplate
    argument: str
    partial: str
    context: Mapping[str, str]
    uri_prefix: str

    @property
    def upper_bound(self) -> str | None:
        return uri_prefix_upper_bound(self.uri_prefix)

    @cached_property
    def _names(self) -> tuple[str, ...]:
        return (self.argument, *self.context)

    @cached_property
    def _groups(self) -> tuple[int | None, ...] | None:
        """The names' match groups in a simple template (None for another)."""
        return None if self.template.simple is None else value_groups(self.template, self._names)

    @cached_property
    def _context_values(self) -> list[str]:
        return list(self.context.values())

    def extract(self, uri: str) -> str | None:
        """The argument's value in ``uri``, if ``uri`` matches, agrees with the context and the value
        starts with the partial value."""
        groups = self._groups
        if groups is None:
            found = match_values(self.template, uri, self._names)
        else:
            found = simple_values(self.template, uri, groups)  # a scan's rows: looked up once
        if found is None:
            return None
        value, *context_values = found
        if context_values != self._context_values:
            return None
        if value is None or not value.startswith(self.partial):
            return None
        return value


def completion_candidates(
    template: ParsedTemplate | str,
    argument: str,
    partial: str,
    context_arguments: Mapping[str, str] | None = None,
) -> CompletionQuery:
    """Plan the completion of ``argument`` (see the module docstring for the prefix's limits).

    Context entries for names that are not template variables, and for the argument itself, are
    ignored.  Raises :class:`InvalidTemplate` if ``argument`` is not a variable of the template.
    """
    parsed = _coerce(template)
    if argument not in parsed.variable_names:
        raise InvalidTemplate(f"{argument!r} is not a variable of this template", parsed.template)
    context = {
        name: value
        for name, value in (context_arguments or {}).items()
        if name in parsed.variable_names and name != argument
    }
    prefix = parsed.literal_prefix
    for candidate in (_expanded_prefix(parsed, argument, partial, context), prefix):
        try:
            prefix = validate_uri_prefix(candidate)
            break
        except InvalidUri:
            continue
    return CompletionQuery(parsed, argument, partial, context, prefix)


def _expanded_prefix(parsed: ParsedTemplate, argument: str, partial: str, context: Mapping[str, str]) -> str:
    raw = parsed.template
    out = [parsed.literal_prefix]
    spans = _expressions(raw)
    for index, (start, end) in enumerate(spans):
        expression = _expression(raw[start:end])
        if raw[start + 1] in "?&":
            break  # query parameters match in any order: no prefix beyond this point
        defined: dict[str, str] = {}
        complete = True
        for name in expression.variable_names:
            if name == argument:
                value, complete = _unique_run(partial)[0], False
            elif name in context:
                value, complete = _unique_run(context[name])
            else:
                complete = False
                break
            defined[name] = value
            if not complete:
                break
        if defined:
            out.append(expression.expand(defined))
        if not complete:
            break
        following = spans[index + 1][0] if index + 1 < len(spans) else len(raw)
        out.append(raw[end:following])
    return "".join(out)


@lru_cache(maxsize=1024)
def _expression(text: str) -> UriTemplate:
    """One ``{...}`` expression as the SDK parses it (cached: every completion of a template parses
    the same ones, and the parsed form is never changed)."""
    from mcp.shared.uri_template import UriTemplate

    return UriTemplate.parse(text)


def _unique_run(value: str) -> tuple[str, bool]:
    """The longest start of ``value`` whose encoding in a canonical URI is unique, and whether that
    is all of it."""
    run = _UNIQUE_SPELLING.match(value)
    assert run is not None
    head = _SURROGATE.split(run.group(), maxsplit=1)[0]
    return head, head == value
