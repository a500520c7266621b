"""The one place for resource-template rules: RFC 6570 parsing, matching, bodies and completion.

Parsing and expansion are the MCP SDK's :class:`mcp.shared.uri_template.UriTemplate`; this module
adds the catalogue's rules on top.  Matching has the SDK's semantics on a scan of this module whose
work is linear in the URI for every template (see "The matching rule" below).

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
  values come back percent-decoded.  Optional variables the URI leaves undefined (``{?q}``, and
  ``{/y}``, ``{.ext}``, ``{;p}``, ``{#f}``: RFC 6570 then omits their lead character too) are absent
  from the result.  Reading costs at most :data:`MATCH_STEPS_PER_CHARACTER` characters per
  character of URI and template, per shape (:func:`match_steps` counts them).  Templates some of
  whose expansions could not be read back are refused when created (:func:`check_readable`).
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
from itertools import combinations, islice, product
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
    "MATCH_STEPS_PER_CHARACTER",
    "MAX_MATCH_SHAPES",
    "MAX_TEMPLATE_BYTES",
    "BodyEscaping",
    "CompletionQuery",
    "InvalidTemplate",
    "ParsedTemplate",
    "body_escaping",
    "check_readable",
    "completion_candidates",
    "expand",
    "literal_prefix",
    "match",
    "match_steps",
    "match_values",
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
    # How :func:`match` reads a URI (compiled once: parsed templates are cached).
    matcher: _Matcher = field(repr=False, compare=False)

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
        matcher=_compile_matcher(raw, tuple(parsed.variable_names)),
    )


def _coerce(template: ParsedTemplate | str) -> ParsedTemplate:
    return template if isinstance(template, ParsedTemplate) else parse_template(template)


def literal_prefix(template: ParsedTemplate | str) -> str:
    """The literal text before the first expression (the whole template if it has none)."""
    return _coerce(template).literal_prefix


def variable_names(template: ParsedTemplate | str) -> tuple[str, ...]:
    """The template's variable names, in order of appearance."""
    return _coerce(template).variable_names


def match(template: ParsedTemplate | str, uri: str) -> dict[str, str] | None:
    """The variables of canonical ``uri`` if it matches ``template``, else ``None``.

    An optional variable the URI leaves undefined (``{?q}``, ``{/y}``, ``{.ext}``, ...) is absent from
    the result.
    """
    parsed = _coerce(template)
    found = _match_raw(parsed, uri, None)
    if found is None:
        return None
    return _mapping(parsed, found)


def match_steps(template: ParsedTemplate | str, uri: str) -> tuple[dict[str, str] | None, int]:
    """:func:`match`'s answer and the number of characters its scan read: the work a match does,
    which is at most ``MATCH_STEPS_PER_CHARACTER`` per character of the URI and of the template per
    shape tried (tests hold every template to that)."""
    parsed = _coerce(template)
    counter = [0]
    found = _match_raw(parsed, uri, counter)
    if found is None:
        return None, counter[0]
    return _mapping(parsed, found), counter[0]


def _mapping(parsed: ParsedTemplate, found: list[str | None]) -> dict[str, str]:
    names = parsed.variable_names
    return {name: _unquoted(value) for name, value in zip(names, found, strict=True) if value is not None}


def match_values(template: ParsedTemplate, uri: str, names: tuple[str, ...]) -> list[str | None] | None:
    """``match(template, uri)``'s values of ``names`` (None for one it has none for), else ``None``."""
    return indexed_values(template, uri, value_indexes(template, names))


def value_indexes(template: ParsedTemplate, names: tuple[str, ...]) -> tuple[int | None, ...]:
    """The positions of ``names`` among the template's variables (None for a name it lacks), for
    :func:`indexed_values`: completion matches every row of a scan against the same names."""
    positions = template.variable_names  # the SDK refuses a variable named twice
    return tuple(positions.index(name) if name in positions else None for name in names)


def indexed_values(
    template: ParsedTemplate, uri: str, indexes: tuple[int | None, ...]
) -> list[str | None] | None:
    """:func:`match_values` with the names' positions looked up beforehand (:func:`value_indexes`)."""
    found = _match_raw(template, uri, None)
    if found is None:
        return None
    out: list[str | None] = []
    for index in indexes:
        value = None if index is None else found[index]
        out.append(None if value is None else _unquoted(value))
    return out


# The matching rule, one definition for reads, completion and every other caller.
#
# Semantics are the SDK's ``UriTemplate.match`` (a URI the SDK matches gets the SDK's values; tests
# compare the two on generated templates): values end at their operator's stop characters; in a
# template without ``{+var}``/``{#var}`` the atoms are scanned right to left, each value as short
# as its preceding literal's last occurrence allows, which gives the first value the rest (what a
# regular expression's greedy groups give, without trying another split when one fails: for
# simple expressions no other split can succeed then); around a ``{+var}``/``{#var}`` the values
# before it are as short as possible (first occurrence of the following literal) and those after
# it likewise from the right; it takes the middle. A trailing ``{?a,b}{&c}`` is a query matched in
# any order, extra parameters ignored.
#
# The work is linear. The SDK's scan re-reads a value's whole run of non-stop characters for each
# variable (``O(len(uri) * variables)``), and the regular expression this module used for simple
# templates backtracked (``O(len(uri) ** variables)`` on a near miss: a read of
# ``test://logs/{year}-{month}-{day}-{slug}`` with 400 dashes took 50 s). Here no search reads a
# character twice for the same purpose: a literal search reads only the characters its value then
# takes (or fails the shape), and a stop search remembers the stop it found, the scan's position
# only moving one way, so each stop set's searches together read each character once. Every search
# counts what it reads (:func:`match_steps`), so tests bound the work by counting.
#
# Undefined variables (RES-15): RFC 6570 omits an undefined variable's expansion, lead character
# included, so ``test://x/{id}{.ext}`` expanded without ``ext`` is ``test://x/a``. A URI is tried
# against the template's *shapes*: every choice of present variables of its ``{/..}``, ``{.}``,
# ``{;..}``, ``{#..}``, ``{?..}``, ``{&..}`` expressions outside the query tail, all present first,
# then fewer (an expression's earlier variables kept longer). So ``test://x/a.b`` is
# ``{id: a, ext: b}`` and ``test://x/a`` is ``{id: a}``. An undefined ``{a}`` or ``{+a}`` expands as
# the empty value does, and matches as it. An expression that could leave a variable undefined
# without the URI saying which (``{a,b}``, ``{+a,b}``, ``{/a,b}``, ``{.a,b}``, ``{#a,b}``: ``x`` is
# either value) is refused when a template is created (:func:`check_readable`), as is one with more
# than :data:`MAX_MATCH_SHAPES` shapes; stored ones are matched with all their variables present
# (and on their first shapes).

# RFC 6570 Appendix A: what an operator writes before its first value, between values, and whether
# it names them (``;name=v``): the tables the SDK expands with.
_OPERATOR_SPECS: Final[dict[str, tuple[str, str, bool]]] = {
    "": ("", ",", False),
    "+": ("", ",", False),
    "#": ("#", ",", False),
    ".": (".", ".", False),
    "/": ("/", "/", False),
    ";": (";", ";", True),
    "?": ("?", "&", True),
    "&": ("&", "&", True),
}
# Where a value of each operator ends (the SDK's ``_STOP_CHARS``): characters its expansion encodes.
_STOP_CHARS: Final[dict[str, str]] = {
    "": "/?#&,",
    "+": "?#",
    "#": "",
    ".": "./?#",
    "/": "/?#",
    ";": ";/?#",
    "?": "&#",
    "&": "&#",
}
_STOP_PATTERNS: Final = {
    stops: re.compile(f"[{re.escape(stops)}]") for stops in set(_STOP_CHARS.values()) if stops
}
_MULTI_SEGMENT: Final = frozenset("+#")
# Operators whose undefined variables leave the URI without their lead character.
_OPTIONAL_OPERATORS: Final = frozenset("#./;?&")
# How many shapes a template may have: each is one linear scan of a URI that does not match.
MAX_MATCH_SHAPES: Final = 16
# The bound on a shape's work, in characters read per character of URI and of template: the URI
# reversed once (1), each of the 6 stop sets' searches right to left and left to right (12), the
# literal searches' characters (the values', 2 with the one that fails), the multi-segment value's
# stop check (1), the query split (1); each literal compared or searched for once or twice (the
# template's characters). Tests hold every template to it; the scans seen read 3 at most.
MATCH_STEPS_PER_CHARACTER: Final = 20

_Part = str | tuple[str, tuple[str, ...]]  # a literal, or an expression's (operator, variables)


@dataclass(frozen=True, slots=True)
class _Lit:
    text: str


@dataclass(frozen=True, slots=True)
class _Cap:
    index: int  # the variable's position in ``variable_names``
    stops: str
    ifemp: bool = False  # ``{;name}``: a bare ``;name`` is the empty value


_Atom = _Lit | _Cap


@dataclass(frozen=True, slots=True)
class _Shape:
    """One way to write a URI's path part: the atoms before the multi-segment variable (values as
    short as possible, left to right), that variable, and the atoms after it (right to left);
    without one, every atom is after it. Those are kept as the ``tail`` literal that ends the URI
    and, right to left, each value's ``(position, stop characters, literal before it, ifemp)``: the
    atoms after the multi-segment variable alternate, starting and maybe ending with a literal."""

    prefix: tuple[_Atom, ...]
    greedy: _Cap | None
    tail: str
    pairs: tuple[tuple[int, str, str, bool], ...]


@dataclass(frozen=True, slots=True)
class _Matcher:
    shapes: tuple[_Shape, ...]
    shape_count: int  # before the cap at MAX_MATCH_SHAPES
    query: tuple[tuple[str, int], ...]  # the query tail's (name, position)
    width: int
    ambiguous: str | None  # an expression whose undefined variable the URI cannot tell


class _Scan:
    """The character searches of a left-to-right scan of ``uri`` (the values before a
    multi-segment variable), each adding what it reads to ``steps``.

    A stop search remembers, per stop set, the stop it found: the scan asks for ever larger
    positions, so a later question is answered by the remembered stop or searches on from past it,
    over characters no search of that set has read; each is one search of a compiled character
    class, whatever the number of stop characters.
    """

    __slots__ = ("_after", "steps", "uri")

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.steps = 0
        self._after: dict[str, int] = {}  # stop set -> its first stop at or after the positions asked

    def next_stop(self, stops: str, pos: int, limit: int) -> int:
        """The position of the first character of ``stops`` at or after ``pos``, else ``limit`` (one
        limit per scan)."""
        found = self._after.get(stops)
        if found is not None and found >= pos:
            return found
        hit = _STOP_PATTERNS[stops].search(self.uri, pos, limit) if stops else None
        found = limit if hit is None else hit.start()
        self.steps += found - pos + 1
        self._after[stops] = found
        return found

    def find(self, text: str, start: int, end: int) -> int:
        """The first occurrence of ``text`` within ``uri[start:end]`` (-1 if none)."""
        found = self.uri.find(text, start, end)
        self.steps += max((end if found == -1 else found + len(text)) - start, 0)
        return found

    def at(self, text: str, pos: int) -> bool:
        """Whether ``text`` occurs at ``pos``."""
        self.steps += len(text)
        return self.uri.startswith(text, pos)

    def ends_at(self, text: str, pos: int) -> bool:
        """Whether ``text`` occurs just before ``pos``."""
        self.steps += len(text)
        return pos >= len(text) and self.uri.startswith(text, pos - len(text))

    def has_stop(self, stops: str, start: int, end: int) -> bool:
        """Whether ``uri[start:end]`` holds a character of ``stops``."""
        if not stops or end <= start:
            return False
        self.steps += end - start
        return any(self.uri.find(char, start, end) != -1 for char in stops)


def _parts(raw: str) -> list[_Part]:
    """``raw`` as the SDK splits it: non-empty literals and expressions, in order."""
    parts: list[_Part] = []
    for literal, span in zip(_literals(raw), [*_expressions(raw), None], strict=True):
        if literal:
            parts.append(literal)
        if span is not None:
            body = raw[span[0] + 1 : span[1] - 1]
            operator = body[0] if body[0] in "+#./;?&" else ""
            parts.append((operator, tuple(body[len(operator) :].split(","))))
    return parts


def _split_query_tail(parts: list[_Part]) -> tuple[list[_Part], list[str]]:
    """The SDK's rule: a trailing run of ``{?..}``/``{&..}`` starting with ``{?..}``, after a path
    without a ``?``/``#`` literal or ``{?..}``/``{#..}``, is a query matched in any order."""
    split = len(parts)
    while split > 0 and isinstance(parts[split - 1], tuple) and parts[split - 1][0] in ("?", "&"):
        split -= 1
    tail = parts[split:]
    if not tail or tail[0][0] != "?":
        return parts, []
    for part in parts[:split]:
        if isinstance(part, str) and ("?" in part or "#" in part):
            return parts, []
        if isinstance(part, tuple) and part[0] in ("?", "#"):
            return parts, []
    return parts[:split], [name for part in tail for name in part[1]]


def _flatten(path: list[_Part], chosen: tuple[tuple[str, ...], ...], index: Mapping[str, int]) -> list[_Atom]:
    """The atoms of ``path`` with the expressions' variables ``chosen`` present (the SDK's
    ``_flatten``: adjacent literals joined, so literal searches look for the longest text)."""
    atoms: list[_Atom] = []

    def literal(text: str) -> None:
        if text and atoms and isinstance(atoms[-1], _Lit):
            atoms[-1] = _Lit(atoms[-1].text + text)
        elif text:
            atoms.append(_Lit(text))

    expressions = iter(chosen)
    for part in path:
        if isinstance(part, str):
            literal(part)
            continue
        operator = part[0]
        lead, separator, named = _OPERATOR_SPECS[operator]
        for position, name in enumerate(next(expressions)):
            head = lead if position == 0 else separator
            if operator == ";":
                literal(f"{head}{name}")
                atoms.append(_Cap(index[name], _STOP_CHARS[operator], ifemp=True))
            else:
                literal(f"{head}{name}=" if named else head)
                atoms.append(_Cap(index[name], _STOP_CHARS[operator]))
    return atoms


def _partition(atoms: list[_Atom], greedy_names: frozenset[int]) -> _Shape:
    prefix: list[_Atom] = []
    greedy: _Cap | None = None
    for i, atom in enumerate(atoms):
        if isinstance(atom, _Cap) and atom.index in greedy_names:
            prefix, greedy, atoms = atoms[:i], atom, atoms[i + 1 :]
            break
    tail = atoms[-1].text if atoms and isinstance(atoms[-1], _Lit) else ""
    pairs: list[tuple[int, str, str, bool]] = []
    for i in range(len(atoms) - 1, 0, -1):
        atom, before = atoms[i], atoms[i - 1]
        if isinstance(atom, _Cap):
            assert isinstance(before, _Lit)  # the SDK refuses two variables side by side
            pairs.append((atom.index, atom.stops, before.text, atom.ifemp))
    return _Shape(tuple(prefix), greedy, tail, tuple(pairs))


def _compile_matcher(raw: str, names: tuple[str, ...]) -> _Matcher:
    """The shapes of ``raw`` (accepted by the SDK's parser), in the order they are tried."""
    index = {name: i for i, name in enumerate(names)}
    path, query = _split_query_tail(_parts(raw))
    choices: list[list[tuple[str, ...]]] = []
    greedy: set[int] = set()
    ambiguous: str | None = None
    for part in path:
        if isinstance(part, str):
            continue
        operator, variables = part
        if operator in _MULTI_SEGMENT:
            greedy.update(index[name] for name in variables)
        named = _OPERATOR_SPECS[operator][2]
        if len(variables) > 1 and not named and ambiguous is None:
            ambiguous = "{" + operator + ",".join(variables) + "}"
        if operator in _OPTIONAL_OPERATORS and (named or len(variables) == 1):
            # Every subset of the expression's variables, the larger first.
            choices.append(
                [c for size in range(len(variables), -1, -1) for c in combinations(variables, size)]
            )
        else:
            choices.append([variables])
    count = 1
    for options in choices:
        count *= len(options)
    shapes = tuple(
        _partition(_flatten(path, chosen, index), frozenset(greedy))
        for chosen in islice(product(*choices), MAX_MATCH_SHAPES)
    )
    return _Matcher(shapes, count, tuple((name, index[name]) for name in query), len(names), ambiguous)


def _scan_suffix(uri: str, shape: _Shape, anchored: bool, out: list[str | None]) -> tuple[int | None, int]:
    """Match the shape's atoms after its multi-segment variable, right to left from the URI's
    end: where they start (or None), and the characters read.

    ``anchored``: the atoms are the whole template, whose first literal is at 0 (not at its last
    occurrence within the first value). The hot path of completion (a row at a time), so written
    out with locals rather than through :class:`_Scan`; it counts the same way: a stop search reads
    from its position down to the stop it finds, and is not repeated while the scan stays above
    that stop (one per stop set); a literal search reads down to where it finds the literal, which
    is where the scan goes on.
    """
    size = len(uri)
    tail = shape.tail
    steps = len(tail)
    if not uri.endswith(tail):
        return None, steps
    pos = size - len(tail)
    reversed_uri = ""
    stop_found: dict[str, int] = {}  # stop set -> its last stop below the positions asked
    last = len(shape.pairs) - 1
    for step, (index, stops, before, ifemp) in enumerate(shape.pairs):
        found = stop_found.get(stops)
        if found is None or found >= pos:
            if not stops:
                found = -1
            else:
                if not reversed_uri:
                    reversed_uri = uri[::-1]
                    steps += size
                hit = _STOP_PATTERNS[stops].search(reversed_uri, size - pos)
                found = -1 if hit is None else size - 1 - hit.start()
                steps += pos - found
            stop_found[stops] = found
        earliest = found + 1
        width = len(before)
        if ifemp:
            # ``;name`` alone is the empty value, else ``;name=value``.
            steps += width
            if pos >= width and uri.startswith(before, pos - width):
                out[index] = ""
            else:
                equals = uri.find("=", earliest, pos)
                steps += (pos if equals == -1 else equals + 1) - earliest + width
                if equals == -1 or equals < width or not uri.startswith(before, equals - width):
                    return None, steps
                out[index] = uri[equals + 1 : pos]
                pos = equals
            pos -= width
        elif anchored and step == last:
            steps += width
            if width < earliest or width > pos or not uri.startswith(before):
                return None, steps
            out[index] = uri[width:pos]
            pos = 0
        else:
            start = earliest - width if earliest > width else 0
            found = uri.rfind(before, start, pos)
            steps += pos - (start if found == -1 else found)
            if found == -1:
                return None, steps
            out[index] = uri[found + width : pos]
            pos = found
    return pos, steps


def _scan_prefix(scan: _Scan, atoms: tuple[_Atom, ...], limit: int, out: list[str | None]) -> int | None:
    """Match ``atoms`` left to right from 0, not past ``limit``; where they end, or None."""
    uri = scan.uri
    pos = 0
    for i, atom in enumerate(atoms):
        if isinstance(atom, _Lit):
            if pos + len(atom.text) > limit or not scan.at(atom.text, pos):
                return None
            pos += len(atom.text)
            continue
        following = atoms[i + 1]  # the SDK refuses a variable next to the multi-segment one
        assert isinstance(following, _Lit)
        if atom.ifemp:
            if scan.at(following.text, pos):
                out[atom.index] = ""
                continue
            if pos < limit and uri[pos] == "=":
                pos += 1
            else:
                return None
        latest = scan.next_stop(atom.stops, pos, limit)
        end = scan.find(following.text, pos, latest + len(following.text))
        if end == -1:
            return None
        out[atom.index] = uri[pos:end]
        pos = end
    return pos


def _scan_shape(uri: str, shape: _Shape, out: list[str | None]) -> tuple[bool, int]:
    """Whether ``uri`` (a path part) has ``shape``, its values put in ``out``; and the characters
    read."""
    if shape.greedy is None:
        start, steps = _scan_suffix(uri, shape, True, out)
        return start == 0, steps
    start, steps = _scan_suffix(uri, shape, False, out)
    if start is None:
        return False, steps
    scan = _Scan(uri)
    end = _scan_prefix(scan, shape.prefix, start, out)
    matched = end is not None and end <= start and not scan.has_stop(shape.greedy.stops, end, start)
    if matched:
        out[shape.greedy.index] = uri[end:start]
    return matched, steps + scan.steps


def _match_raw(parsed: ParsedTemplate, uri: str, counter: list[int] | None) -> list[str | None] | None:
    """The raw (still percent-encoded) value of each variable, None for an undefined one; or None.
    ``counter[0]`` gets the characters read."""
    if len(uri) > MAX_URI_BYTES:
        return None
    matcher = parsed.matcher
    path = uri
    query = ""
    if matcher.query:
        path, _, query = uri.partition("#")[0].partition("?")
    found: list[str | None] | None = None
    for shape in matcher.shapes:
        out: list[str | None] = [None] * matcher.width
        matched, steps = _scan_shape(path, shape, out)
        if counter is not None:
            counter[0] += steps
        if matched:
            found = out
            break
    if found is None:
        return None
    if query:
        if counter is not None:
            counter[0] += len(query)
        wanted = dict(matcher.query)
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            position = wanted.pop(name, None)  # the first of a repeated name counts; names not decoded
            if position is not None:
                found[position] = value
    return found


def check_readable(template: ParsedTemplate | str) -> None:
    """Refuse a template some of whose expansions :func:`match` could not read back (RES-15): one
    with an expression that leaves the URI unable to say which variable is undefined, or with more
    than :data:`MAX_MATCH_SHAPES` shapes. Templates are checked when created; stored ones are
    read as they are."""
    parsed = _coerce(template)
    matcher = parsed.matcher
    if matcher.ambiguous is not None:
        raise InvalidTemplate(
            f"{matcher.ambiguous} has several variables and no names in its expansion: with one"
            " undefined, the URI cannot say which; give each variable its own expression",
            parsed.template,
        )
    if matcher.shape_count > MAX_MATCH_SHAPES:
        raise InvalidTemplate(
            f"its optional variables can be left undefined in {matcher.shape_count} combinations;"
            f" at most {MAX_MATCH_SHAPES} are matched",
            parsed.template,
        )


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
    def _indexes(self) -> tuple[int | None, ...]:
        """The names' positions among the template's variables, looked up once for a scan's rows."""
        return value_indexes(self.template, self._names)

    @cached_property
    def _context_values(self) -> list[str]:
        return list(self.context.values())

    def extract(self, uri: str) -> str | None:
        """The argument's value in ``uri``, if ``uri`` matches, agrees with the context and the value
        starts with the partial value."""
        found = indexed_values(self.template, uri, self._indexes)
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
