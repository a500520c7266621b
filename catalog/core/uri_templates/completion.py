"""Completing a template argument: the stored URIs to scan (a prefix range) and the value each
gives."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Final

from catalog.core.uri_templates.matching import indexed_values, value_indexes
from catalog.core.uri_templates.parsing import LONE_SURROGATE, InvalidTemplate, ParsedTemplate, as_parsed
from catalog.core.uri_templates.scanner import expressions
from catalog.core.uris import InvalidUri, uri_prefix_upper_bound, validate_uri_prefix

if TYPE_CHECKING:
    # Imported where a template is parsed: any ``mcp.*`` import runs the SDK's ``__init__`` (its
    # client and server, 0.4-0.8 s), which a command that never parses a template must not pay for.
    from mcp.shared.uri_template import UriTemplate


_UNIQUE_SPELLING: Final = re.compile(r"[A-Za-z0-9\-._~\u0080-\U0010ffff]*")


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
    parsed = as_parsed(template)
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
    spans = expressions(raw)
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
    head = LONE_SURROGATE.split(run.group(), maxsplit=1)[0]
    return head, head == value
