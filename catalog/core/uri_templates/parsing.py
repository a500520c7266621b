"""Which templates the catalogue accepts (:func:`parse_template`), the parsed form, and expansion."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Final

from catalog.core.uri_templates.scanner import Matcher, by_name, compile_matcher, literals, match_raw
from catalog.core.uris import InvalidUri, check_uri_characters, normalize_uri, validate_uri_prefix

if TYPE_CHECKING:
    # Imported where a template is parsed: any ``mcp.*`` import runs the SDK's ``__init__`` (its
    # client and server, 0.4-0.8 s), which a command that never parses a template must not pay for.
    from mcp.shared.uri_template import UriTemplate


MAX_TEMPLATE_BYTES: Final = 2048

LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


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
    matcher: Matcher = field(repr=False, compare=False)

    def match(self, uri: str) -> dict[str, str] | None:
        """``catalog.core.uri_templates.matching.match(self, uri)``."""
        found = match_raw(self.matcher, uri, None)
        return None if found is None else by_name(self.variable_names, found)

    def expand(self, variables: Mapping[str, str]) -> str:
        return expand(self, variables)


def parse_template(raw: str) -> ParsedTemplate:
    """Validate ``raw`` (see the package docstring) and return it parsed (cached: results are immutable)."""
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
    for literal in literals(raw):
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
        matcher=compile_matcher(raw, tuple(parsed.variable_names)),
    )


def as_parsed(template: ParsedTemplate | str) -> ParsedTemplate:
    return template if isinstance(template, ParsedTemplate) else parse_template(template)


def literal_prefix(template: ParsedTemplate | str) -> str:
    """The literal text before the first expression (the whole template if it has none)."""
    return as_parsed(template).literal_prefix


def variable_names(template: ParsedTemplate | str) -> tuple[str, ...]:
    """The template's variable names, in order of appearance."""
    return as_parsed(template).variable_names


def expand(template: ParsedTemplate | str, variables: Mapping[str, str]) -> str:
    """Expand ``template``; the result is a canonical URI that :func:`match` maps back.

    Raises :class:`InvalidUri` if the expansion is refused (a value of ``..``) or is not canonical
    (a value of ``.``, which would be stored as a different URI that no longer matches).
    """
    raw = as_parsed(template).uri_template.expand(variables)
    canonical = normalize_uri(raw)
    if canonical != raw:
        raise InvalidUri(f"the expansion is not canonical (it would be stored as {canonical!r})", raw)
    return raw
