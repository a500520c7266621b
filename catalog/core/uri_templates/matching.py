"""Matching a canonical URI against a template: its variables, percent-decoded (the rule and its
linear scan are :mod:`catalog.core.uri_templates.scanner`'s), and the check that a template's
expansions can be read back."""

from __future__ import annotations

from catalog.core.uri_templates.parsing import InvalidTemplate, ParsedTemplate, as_parsed
from catalog.core.uri_templates.scanner import MAX_MATCH_SHAPES, by_name, expressions, match_raw, unquoted


def match(template: ParsedTemplate | str, uri: str) -> dict[str, str] | None:
    """The variables of canonical ``uri`` if it matches ``template``, else ``None``.

    An optional variable the URI leaves undefined (``{?q}``, ``{/y}``, ``{.ext}``, ...) is absent from
    the result.
    """
    parsed = as_parsed(template)
    found = match_raw(parsed.matcher, uri, None)
    if found is None:
        return None
    return by_name(parsed.variable_names, found)


def match_steps(template: ParsedTemplate | str, uri: str) -> tuple[dict[str, str] | None, int]:
    """:func:`match`'s answer and the number of characters its scan read: the work a match does,
    which is at most ``MATCH_STEPS_PER_CHARACTER`` per character of the URI and of the template per
    shape tried (tests hold every template to that)."""
    parsed = as_parsed(template)
    counter = [0]
    found = match_raw(parsed.matcher, uri, counter)
    if found is None:
        return None, counter[0]
    return by_name(parsed.variable_names, found), counter[0]


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
    found = match_raw(template.matcher, uri, None)
    if found is None:
        return None
    out: list[str | None] = []
    for index in indexes:
        value = None if index is None else found[index]
        out.append(None if value is None else unquoted(value))
    return out


def check_readable(template: ParsedTemplate | str) -> None:
    """Refuse a template some of whose expansions :func:`match` could not read back (RES-15): one
    with an expression that leaves the URI unable to say which variable is undefined, or with more
    than :data:`MAX_MATCH_SHAPES` shapes. Templates are checked when created; stored ones are
    read as they are."""
    parsed = as_parsed(template)
    matcher = parsed.matcher
    if matcher.ambiguous is not None:
        raise InvalidTemplate(
            f"{matcher.ambiguous} has several variables and no names in its expansion: with one"
            " undefined, the URI cannot say which; give each variable its own expression",
            parsed.template,
        )
    empty_then_equals = _parameter_then_equals(parsed.template)
    if empty_then_equals is not None:
        raise InvalidTemplate(
            f"{empty_then_equals} can be followed by '=': an empty value (';name') and a value"
            " (';name=...') would read alike; put another character between them",
            parsed.template,
        )
    if matcher.shape_count > MAX_MATCH_SHAPES:
        raise InvalidTemplate(
            f"its optional variables can be left undefined in {matcher.shape_count} combinations;"
            f" at most {MAX_MATCH_SHAPES} are matched",
            parsed.template,
        )


def _parameter_then_equals(raw: str) -> str | None:
    """The first ``{;...}`` expression whose expansion can be followed directly by ``=``, if any.

    RFC 6570 expands an empty ``;`` parameter as ``;name`` with no ``=``, so ``;name=x`` could be
    the parameter with value ``x`` or an empty one followed by ``=x``. What follows it can start with
    ``=`` when it is a literal beginning with ``=`` or a reserved ``{+...}`` expansion, past any
    expressions that can expand to nothing (every other kind can)."""
    spans = expressions(raw)
    for i, (start, end) in enumerate(spans):
        if not raw.startswith("{;", start):
            continue
        pos = end
        for next_start, next_end in spans[i + 1 :]:
            if next_start != pos:  # a literal comes first
                break
            if raw.startswith("{+", next_start):
                return raw[start:end]
            pos = next_end
        if raw.startswith("=", pos):
            return raw[start:end]
    return None
