"""catalog.core.uri_templates: parsing, matching, body rendering and escaping, completion plans."""

from __future__ import annotations

import contextlib
import html
import json
import xml.etree.ElementTree as ET

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mcp.shared.path_security import contains_path_traversal
from mcp.shared.uri_template import UriTemplate

from catalog.core.uri_templates.bodies import body_escaping, render_body, validate_body
from catalog.core.uri_templates.completion import CompletionQuery, completion_candidates
from catalog.core.uri_templates.matching import match, match_values
from catalog.core.uri_templates.parsing import (
    MAX_TEMPLATE_BYTES,
    InvalidTemplate,
    ParsedTemplate,
    expand,
    literal_prefix,
    parse_template,
    variable_names,
)
from catalog.core.uris import InvalidUri, normalize_uri

# --------------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize(
    ("raw", "prefix", "names"),
    [
        ("test://template/{id}/data", "test://template/", ("id",)),
        ("file:///{dir}/{name}", "file:///", ("dir", "name")),
        ("file:///{+path}", "file:///", ("path",)),
        ("test:{id}", "test:", ("id",)),
        ("test://x/{a,b}", "test://x/", ("a", "b")),
        ("test://x{/seg}", "test://x", ("seg",)),
        ("test://x/{id}{.ext}", "test://x/", ("id", "ext")),
        ("test://x/{id}{?q,lang}", "test://x/", ("id", "q", "lang")),
        ("test://x/{id}{#frag}", "test://x/", ("id", "frag")),
        ("test://x/{id}{;v}", "test://x/", ("id", "v")),
        ("test://x/{user.name}", "test://x/", ("user.name",)),
        ("test://static", "test://static", ()),  # no expression: still a (trivial) template
        ("test://x/caf%C3%A9/{id}", "test://x/caf%C3%A9/", ("id",)),
    ],
)
def test_parse_template_gives_prefix_and_variables(raw: str, prefix: str, names: tuple[str, ...]) -> None:
    parsed = parse_template(raw)
    assert isinstance(parsed, ParsedTemplate)
    assert parsed.template == raw
    assert parsed.literal_prefix == prefix == literal_prefix(raw) == literal_prefix(parsed)
    assert parsed.variable_names == names == variable_names(raw)
    assert isinstance(parsed.uri_template, UriTemplate)


def test_parse_template_reports_optional_query_variables() -> None:
    assert parse_template("test://x/{id}{?q,lang}").query_variable_names == {"q", "lang"}
    assert parse_template("test://x/{id}").query_variable_names == frozenset()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "scheme"),
        ("{scheme}://x/{id}", "scheme"),
        ("/relative/{id}", "scheme is required"),
        ("1x://{id}", "invalid scheme"),
        ("Test://x/{id}", "write 'test://x/'"),
        ("file://localhost/{id}", "write 'file:///'"),
        ("file:///a//{id}", "write 'file:///a/'"),
        ("test://x/%7e/{id}", "write 'test://x/~/'"),
        ("test://x/café/{id}", "not canonical"),
        ("file:///a/../{id}", "traversal"),
        ("file:///a/%2e%2e/{id}", "traversal"),
        ("file:///{a}/../{b}", "traversal"),
        ("file:///{a}//{b}", "not canonical"),
        ("test://x/{a}/./{b}", "not canonical"),
        ("test://x/{a} {b}", "whitespace"),
        ("test://x/{a}\n", "control character"),
        ("test://x/\u202e{a}", "format character"),
        ("test://x/{a}<b>", "not allowed"),
        ("test://x/{a}}", "'}' outside an expression"),
        ("test://x/{a", "Unclosed expression"),
        ("test://x/{}", "Empty expression"),
        ("test://x/{a-b}", "Invalid variable name"),
        ("test://x/{a}{b}", "adjacent"),
        ("test://x/{a}/{a}", "more than once"),
        ("test://x/{a:3}", "Prefix modifier"),
        ("test://x{/p*}", "explode"),
        ("test://x/{+a}/{+b}", "more than one multi-segment"),
        ("test://x/" + "a" * MAX_TEMPLATE_BYTES + "{id}", "2048"),
        ("test://x/\ud800{id}", "surrogate"),
    ],
)
def test_parse_template_refuses_with_a_reason(raw: str, reason: str) -> None:
    """RES-13 (docs/requirements.toml)."""
    with pytest.raises(InvalidTemplate) as info:
        parse_template(raw)
    assert reason in info.value.reason
    assert info.value.template == raw
    assert isinstance(info.value, ValueError)


def test_parse_template_refuses_non_strings() -> None:
    with pytest.raises(InvalidTemplate, match="not a string"):
        parse_template(None)  # type: ignore[arg-type]


def test_template_at_the_size_limit_is_accepted() -> None:
    head = "test://x/"
    raw = head + "a" * (MAX_TEMPLATE_BYTES - len(head) - len("{id}")) + "{id}"
    assert len(raw.encode()) == MAX_TEMPLATE_BYTES
    assert parse_template(raw).variable_names == ("id",)


# --------------------------------------------------------------------------------------------------
# Matching and expansion


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("test://template/{id}/data", "test://template/123/data", {"id": "123"}),
        ("test://template/{id}/data", "test://template/a%20b/data", {"id": "a b"}),
        ("test://template/{id}/data", "test://template/a/b/data", None),  # {id} is one segment
        ("test://template/{id}/data", "test://template/123/other", None),
        ("test://template/{id}/data", "test://templates/123/data", None),
        ("file:///{dir}/{name}", "file:///src/main.py", {"dir": "src", "name": "main.py"}),
        ("file:///{+path}", "file:///src/lib/x.py", {"path": "src/lib/x.py"}),
        ("test://x/{id}{?q,lang}", "test://x/7", {"id": "7"}),
        ("test://x/{id}{?q,lang}", "test://x/7?lang=en&q=a%26b", {"id": "7", "q": "a&b", "lang": "en"}),
        ("test://x/{id}{.ext}", "test://x/readme.md", {"id": "readme", "ext": "md"}),
        ("test://static", "test://static", {}),
        ("test://static", "test://static/", None),
    ],
)
def test_match(template: str, uri: str, expected: dict[str, str] | None) -> None:
    assert match(template, uri) == expected
    assert parse_template(template).match(uri) == expected


# Characters that make the SDK's scan interesting: its simple stop characters, the template's own
# separators, percent signs (decoded, or not when malformed), a multi-byte one.
_TRICKY = "/?#&,-.=;%a2bé"
_NAMES = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def simple_templates(draw: st.DrawFn) -> str:
    """A template of simple expressions (one or two variables each), literals between them."""
    literal = st.text(alphabet=_TRICKY.replace("%", ""), max_size=4)
    parts = [draw(literal)]
    for _ in range(draw(st.integers(1, 3))):
        parts.append("{" + ",".join(draw(st.lists(_NAMES, min_size=1, max_size=2))) + "}")
        parts.append(draw(literal.filter(bool)) if draw(st.booleans()) else draw(literal))
    return "".join(parts)


@settings(max_examples=600, deadline=None)
@given(raw=simple_templates(), data=st.data())
def test_the_simple_matcher_matches_exactly_as_the_sdk(raw: str, data: st.DataObject) -> None:
    """``match``'s linear scan, on a template of simple expressions, agrees with the SDK's
    ``UriTemplate.match`` on generated templates and URIs (the template's own expansions, then
    mutated, and arbitrary text), behind a literal prefix as every catalogue template has."""
    raw = "test://h/" + raw
    try:
        sdk = UriTemplate.parse(raw)
        parsed = parse_template(raw)
    except ValueError:
        assume(False)
        return
    values = {name: data.draw(st.text(alphabet=_TRICKY, max_size=5)) for name in sdk.variable_names}
    expanded = sdk.expand(values)
    uris = [expanded, "test://h/" + data.draw(st.text(alphabet=_TRICKY, max_size=12))]
    if expanded:
        cut = data.draw(st.integers(0, len(expanded)))
        uris.append(expanded[:cut] + data.draw(st.text(alphabet=_TRICKY, max_size=3)) + expanded[cut:])
    for uri in uris:
        ours = match(parsed, uri)
        assert ours == sdk.match(uri), (raw, uri)


@settings(max_examples=400, deadline=None)
@given(tail=simple_templates(), data=st.data())
def test_completion_reads_a_rows_values_as_match_does(tail: str, data: st.DataObject) -> None:
    """``match_values`` (what completion reads of each row) is ``match``'s mapping, name by name,
    percent-decoding included, on the template's own expansions and on other URIs."""
    try:
        parsed = parse_template("test://h/" + tail)
    except InvalidTemplate:
        assume(False)
        return
    values = {name: data.draw(st.text(alphabet=_TRICKY, max_size=5)) for name in parsed.variable_names}
    names = (*reversed(parsed.variable_names), "not-a-variable")
    for uri in (
        parsed.uri_template.expand(values),
        "test://h/" + data.draw(st.text(alphabet=_TRICKY, max_size=12)),
    ):
        found = match(parsed, uri)
        expected = None if found is None else [found.get(name) for name in names]
        assert match_values(parsed, uri, names) == expected, (parsed.template, uri)


def test_expand_gives_a_canonical_uri() -> None:
    assert expand("test://template/{id}/data", {"id": "a b/é"}) == "test://template/a%20b%2F%C3%A9/data"
    assert parse_template("file:///{+path}").expand({"path": "src/x.py"}) == "file:///src/x.py"


@pytest.mark.parametrize(
    ("template", "values"),
    [
        ("test://template/{id}/data", {"id": ".."}),
        ("test://template/{id}/data", {"id": "."}),  # would be stored as test://template/data
        ("file:///{+path}", {"path": "a/../../etc/passwd"}),
        ("file:///{+path}", {"path": "a//b"}),
        ("test://template/{id}/data", {"id": "\x00"}),
    ],
)
def test_expand_refuses_values_that_make_a_refused_or_non_canonical_uri(
    template: str, values: dict[str, str]
) -> None:
    with pytest.raises(InvalidUri):
        expand(template, values)


@settings(max_examples=300)
@given(st.text(max_size=30))
def test_expand_then_match_round_trips_any_value(value: str) -> None:
    template = parse_template("test://template/{id}/data")
    try:
        uri = expand(template, {"id": value})
    except InvalidUri:
        assume(False)
        return
    assert normalize_uri(uri) == uri
    assert match(template, uri) == {"id": value}


_PATHISH = st.lists(
    st.sampled_from(["a", "b", ".", "..", "%2e", "%2f", "%5c", "%252e", "/", "é", "%20"]), max_size=12
)


@settings(max_examples=400)
@given(_PATHISH)
def test_values_matched_from_canonical_uris_never_traverse(parts: list[str]) -> None:
    template = parse_template("file:///root/{+path}")
    try:
        uri = normalize_uri("file:///root/" + "".join(parts))
    except InvalidUri:
        return
    found = match(template, uri)
    if found is not None:
        assert not contains_path_traversal(found["path"])
        assert ".." not in found["path"].replace("\\", "/").split("/")


# --------------------------------------------------------------------------------------------------
# Bodies


@pytest.mark.parametrize(
    ("mime", "escaping"),
    [
        ("application/json", "json"),
        ("APPLICATION/JSON; charset=utf-8", "json"),
        ("application/ld+json", "json"),
        ("application/vnd.api+json", "json"),
        ("text/html", "markup"),
        ("text/html;charset=UTF-8", "markup"),
        ("text/xml", "markup"),
        ("application/xml", "markup"),
        ("image/svg+xml", "markup"),
        ("application/xhtml+xml", "markup"),
        ("text/plain", "none"),
        ("text/markdown", "none"),
        ("application/jsonl", "none"),
        (None, "none"),
        ("", "none"),
    ],
)
def test_body_escaping_by_mime_type(mime: str | None, escaping: str) -> None:
    assert body_escaping(mime) == escaping


def test_render_body_substitutes_the_templates_own_variables() -> None:
    assert render_body("id={id}, name={name}", {"id": "7", "name": "x"}, "text/plain") == "id=7, name=x"


def test_render_body_escapes_json_strings_without_quotes() -> None:
    out = render_body('{"id": "{id}"}', {"id": 'a"b\\c\n\t\x01</'}, "application/json")
    assert out == '{"id": "a\\"b\\\\c\\n\\t\\u0001</"}'
    assert json.loads(out) == {"id": 'a"b\\c\n\t\x01</'}


def test_render_body_json_escapes_line_separators() -> None:
    assert render_body('"{v}"', {"v": "\u2028\u2029"}, "application/json") == '"\\u2028\\u2029"'


def test_render_body_escapes_html() -> None:
    out = render_body("<p title='{v}'>{v}</p>", {"v": "<script>&\"'"}, "text/html")
    assert out == "<p title='&lt;script&gt;&amp;&quot;&#x27;'>&lt;script&gt;&amp;&quot;&#x27;</p>"


def test_render_body_replaces_characters_xml_cannot_carry() -> None:
    out = render_body("<r>{v}</r>", {"v": "a\x00b\x1fc\ufffe"}, "application/xml")
    assert out == "<r>a\ufffdb\ufffdc\ufffd</r>"
    ET.fromstring(out)


def test_render_body_is_verbatim_for_plain_text() -> None:
    assert render_body("{v}", {"v": '<&"\\{x}'}, "text/plain") == '<&"\\{x}'
    assert render_body("{v}", {"v": "<&"}, None) == "<&"


def test_render_body_replaces_lone_surrogates_so_the_result_encodes() -> None:
    for mime in ("application/json", "text/html", "text/plain"):
        render_body("{v}", {"v": "a\ud800b"}, mime).encode("utf-8")


def test_render_body_missing_variable_is_empty() -> None:
    assert render_body("q=[{q}]", {}, "text/plain") == "q=[]"


@pytest.mark.parametrize(
    ("body", "rendered"),
    [
        ("{{id}}", "{id}"),  # the literal text of a placeholder
        ("${{HOME}} is {id}", "${HOME} is 7"),
        ("{{{id}}}", "{{id}}"),  # left to right: a brace, then an escaped placeholder
        ('{"a": {"b": "{id}"}}', '{"a": {"b": "7"}}'),
        ("{{", "{{"),
        ("}}", "}}"),
        ("no braces", "no braces"),
        ("", ""),
    ],
)
def test_render_body_braces(body: str, rendered: str) -> None:
    assert render_body(body, {"id": "7"}, "text/plain") == rendered


@pytest.mark.parametrize(
    "body",
    ["{", "a}", '{"id": 1}', "{id", "{}", "{a b}", "{ id }", "}{", '{"a": {"b": [1, {}]}}'],
)
def test_braces_that_are_not_placeholders_are_the_bodys_own_text(body: str) -> None:
    validate_body(body, ("id",))
    assert render_body(body, {"id": "x"}, "text/plain") == body


def test_a_natural_json_body_renders_with_its_own_braces() -> None:
    body = '{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}'
    assert json.loads(render_body(body, {"id": "123"}, "application/json")) == {
        "id": "123",
        "templateTest": True,
        "data": "Data for ID: 123",
    }


def test_validate_body_names_the_unknown_placeholder() -> None:
    validate_body("{id} {{nope}}", ("id",))
    with pytest.raises(InvalidTemplate) as info:
        validate_body("{id} {nope}", ("id", "name"))
    assert "{nope}" in info.value.reason
    assert "id, name" in info.value.reason


_ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=40)


@settings(max_examples=400)
@given(_ANY_TEXT, _ANY_TEXT)
def test_rendered_json_body_stays_valid_json_for_any_values(a: str, b: str) -> None:
    body = '{"id": "{id}", "nested": {"name": "prefix-{name}-suffix"}, "list": ["{id}"]}'
    out = render_body(body, {"id": a, "name": b}, "application/json; charset=utf-8")
    out.encode("utf-8")
    doc = json.loads(out)
    clean = lambda s: "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)  # noqa: E731
    assert doc == {"id": clean(a), "nested": {"name": f"prefix-{clean(b)}-suffix"}, "list": [clean(a)]}


def _xml_clean(value: str) -> str:
    return "".join(
        "\ufffd"
        if (ord(c) < 0x20 and c not in "\t\n\r") or 0xD800 <= ord(c) <= 0xDFFF or c in "\ufffe\uffff"
        else c
        for c in value
    )


@settings(max_examples=300)
@given(_ANY_TEXT)
def test_rendered_xml_body_stays_well_formed_and_carries_the_value(value: str) -> None:
    out = render_body('<r a="{v}"><c>{v}</c></r>', {"v": value}, "image/svg+xml")
    root = ET.fromstring(out.encode("utf-8"))
    text = _xml_clean(value).replace("\r\n", "\n").replace("\r", "\n")  # XML end-of-line handling
    assert (root.findtext("c") or "") == text
    assert root.get("a") == text.replace("\n", " ").replace("\t", " ")  # attribute-value normalisation


# What ``str.isprintable`` accepts: every character but separators and "other" (control, format,
# surrogate, private-use, unassigned) ones, and the space. Drawn from, not filtered for.
_PRINTABLE = st.characters(exclude_categories=("Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn")) | st.just(" ")


@settings(max_examples=300)
@given(st.text(alphabet=_PRINTABLE, max_size=40))
def test_rendered_html_unescapes_to_the_value(value: str) -> None:
    assert value.isprintable()
    out = render_body("{v}", {"v": value}, "text/html")
    assert "<" not in out and ">" not in out and '"' not in out
    assert html.unescape(out) == value


# --------------------------------------------------------------------------------------------------
# Completion


@pytest.mark.parametrize(
    ("template", "argument", "partial", "context", "prefix"),
    [
        ("test://template/{id}/data", "id", "", {}, "test://template/"),
        ("test://template/{id}/data", "id", "12", {}, "test://template/12"),
        ("file:///{dir}/{name}", "name", "", {"dir": "src"}, "file:///src/"),
        ("file:///{dir}/{name}", "name", "ma", {"dir": "src"}, "file:///src/ma"),
        ("file:///{dir}/{name}", "name", "ma", {}, "file:///"),  # stops at the unknown {dir}
        ("file:///{dir}/{name}", "dir", "s", {"name": "x"}, "file:///s"),
        ("file:///{dir}/{name}", "name", "", {"dir": "a!b"}, "file:///a"),  # '!' vs '%21'
        ("file:///{dir}/{name}", "name", "", {"dir": "é"}, "file:///%C3%A9/"),  # unique encoding
        ("file:///{dir}/{name}", "name", "", {"dir": ".."}, "file:///"),  # invalid prefix: fall back
        ("file:///{dir}/{name}", "name", "", {"dir": "."}, "file:///"),  # collapsed, wider
        ("file:///{+path}", "path", "src/ma", {}, "file:///src"),  # '/' vs '%2F'
        ("test://x/{a,b}/z", "b", "", {"a": "1"}, "test://x/1,"),
        ("test://x/{a,b}/z", "a", "p", {}, "test://x/p"),
        ("test://x/{a,b}/z", "b", "", {}, "test://x/"),
        ("test://x/{id}{?q,r}", "r", "1", {"id": "a", "q": "z"}, "test://x/a"),  # query: any order
        ("test://x{/seg}", "seg", "", {}, "test://x/"),
        ("test://x/{id}{;v}", "v", "", {"id": "a"}, "test://x/a;v"),
        ("test://x/{id}{.ext}", "ext", "m", {"id": "readme"}, "test://x/readme.m"),
    ],
)
def test_completion_prefix(
    template: str, argument: str, partial: str, context: dict[str, str], prefix: str
) -> None:
    query = completion_candidates(template, argument, partial, context)
    assert isinstance(query, CompletionQuery)
    assert query.uri_prefix == prefix


def test_completion_ignores_context_for_unknown_names_and_for_the_argument_itself() -> None:
    query = completion_candidates("file:///{dir}/{name}", "name", "", {"name": "zz", "other": "q"})
    assert query.context == {}
    assert query.uri_prefix == "file:///"


def test_completion_of_an_unknown_argument_is_refused() -> None:
    with pytest.raises(InvalidTemplate, match="'nope' is not a variable"):
        completion_candidates("file:///{dir}/{name}", "nope", "", {})


def test_completion_extract_checks_match_context_and_partial() -> None:
    query = completion_candidates("file:///{dir}/{name}", "name", "ma", {"dir": "src"})
    assert query.upper_bound == "file:///src/mb"
    assert query.extract("file:///src/main.py") == "main.py"
    assert query.extract("file:///lib/main.py") is None  # context disagrees
    assert query.extract("file:///src/lib.py") is None  # partial disagrees
    assert query.extract("file:///src/deep/main.py") is None  # not a match
    assert query.extract("test://other") is None


def test_completion_extract_needs_context_query_variables_present() -> None:
    query = completion_candidates("test://x/{id}{?q,r}", "r", "", {"q": "z"})
    assert query.extract("test://x/a?r=12&q=z") == "12"
    assert query.extract("test://x/a?r=12") is None
    assert query.extract("test://x/a?q=z") is None  # no value for the argument


_VALUES = st.text(
    alphabet=st.sampled_from(["a", "b", "m", "é", "!", " ", "-", "%", ",", "."]), min_size=1, max_size=4
)


@settings(max_examples=200)
@given(
    st.lists(st.tuples(_VALUES, _VALUES), min_size=1, max_size=25),
    st.sampled_from(["dir", "name"]),
    _VALUES | st.just(""),
    st.booleans(),
)
def test_completion_prefix_range_never_loses_a_candidate(
    rows: list[tuple[str, str]], argument: str, partial: str, with_context: bool
) -> None:
    template = parse_template("file:///{dir}/{name}")
    stored = set()
    for d, n in rows:
        with contextlib.suppress(InvalidUri):
            stored.add(expand(template, {"dir": d, "name": n}))
    other = "name" if argument == "dir" else "dir"
    context = {other: rows[0][0] if other == "dir" else rows[0][1]} if with_context else {}
    query = completion_candidates(template, argument, partial, context)

    def brute(uri: str) -> str | None:
        found = match(template, uri)
        if found is None or any(found[k] != v for k, v in context.items()):
            return None
        return found[argument] if found[argument].startswith(partial) else None

    expected = {brute(u) for u in stored} - {None}
    upper = query.upper_bound
    in_range = [
        u for u in sorted(stored, key=str.encode) if u >= query.uri_prefix and (upper is None or u < upper)
    ]
    got = {query.extract(u) for u in in_range} - {None}
    assert got == expected


@pytest.mark.parametrize(
    ("template", "uri", "values"),
    [
        # Found by the RES-15 property test: every {?..} undefined, so {&e} starts the query itself.
        ("test://h/;{a};{b};{c}{?d}{&e}", "test://h/;;;&e=", {"a": "", "b": "", "c": "", "e": ""}),
        ("test://h/{a}{&e,f}", "test://h/x&e=1&f=2", {"a": "x", "e": "1", "f": "2"}),
        ("test://h/{a}{?d}{&e}", "test://h/x?d=0&e=1", {"a": "x", "d": "0", "e": "1"}),
    ],
)
def test_a_query_continuation_with_no_query_before_it_reads_back_res_15(
    template: str, uri: str, values: dict[str, str]
) -> None:
    """RES-15: ``{&e}`` expanded with no ``?`` before it is ``&e=...`` straight after the path (RFC
    6570, 3.2.9); the URI it expands to matches the template."""
    from catalog.core.uri_templates.matching import match

    assert match(template, uri) == values
