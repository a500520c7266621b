"""How a URI is matched against a template in linear time: the shapes a template compiles to and
their scan (the matching rule, below; the API is :mod:`catalog.core.uri_templates.matching`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations, islice, product
from typing import Final
from urllib.parse import unquote

from catalog.core.uris import MAX_URI_BYTES

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
class Matcher:
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
    for literal, span in zip(literals(raw), [*expressions(raw), None], strict=True):
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


def compile_matcher(raw: str, names: tuple[str, ...]) -> Matcher:
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
    return Matcher(shapes, count, tuple((name, index[name]) for name in query), len(names), ambiguous)


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


def match_raw(matcher: Matcher, uri: str, counter: list[int] | None) -> list[str | None] | None:
    """The raw (still percent-encoded) value of each variable, None for an undefined one; or None.
    ``counter[0]`` gets the characters read."""
    if len(uri) > MAX_URI_BYTES:
        return None
    path = uri
    query = ""
    if matcher.query:
        path, mark, query = uri.partition("#")[0].partition("?")
        if not mark:
            path, query = _continuation_split(path, matcher.query)
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


def _continuation_split(path: str, wanted: Sequence[tuple[str, int]]) -> tuple[str, str]:
    """A URI with no '?': a form-style continuation (``{&e}``) expanded with no query before it (every
    ``{?...}`` variable undefined, or none) is written as ``&e=...`` straight after the path
    (RFC 6570, 3.2.9). The query starts at the first ``&name=`` of a wanted name: values of the path's
    variables cannot hold a raw '&' (expansion encodes it) -- one candidate, so matching stays linear."""
    found = [at for name, _ in wanted if (at := path.find(f"&{name}=")) >= 0]
    if not found:
        return path, ""
    at = min(found)
    return path[:at], path[at + 1 :]


def by_name(names: tuple[str, ...], found: list[str | None]) -> dict[str, str]:
    """The defined values of :func:`match_raw`'s answer by variable name, percent-decoded."""
    return {name: unquoted(value) for name, value in zip(names, found, strict=True) if value is not None}


def unquoted(text: str) -> str:
    return unquote(text) if "%" in text else text  # unquote's answer, without its call for most values


def expressions(raw: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each ``{...}`` in a template the SDK accepted (literals hold no braces)."""
    spans: list[tuple[int, int]] = []
    i = raw.find("{")
    while i != -1:
        j = raw.index("}", i)
        spans.append((i, j + 1))
        i = raw.find("{", j)
    return spans


def literals(raw: str) -> list[str]:
    out: list[str] = []
    pos = 0
    for start, end in expressions(raw):
        out.append(raw[pos:start])
        pos = end
    out.append(raw[pos:])
    return out
