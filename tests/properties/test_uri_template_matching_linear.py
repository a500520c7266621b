"""Template matching is linear in the URI for every template, agrees with the SDK's rule and with a
plain backtracking reference, and reads back every expansion, undefined optional variables
included (RES-15): generated templates and hostile URIs, then the red team's case through the admin
API and an MCP read."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import mcp_types as types
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError

from catalog.core import reading
from catalog.core.uri_templates.matching import check_readable, match, match_steps, match_values
from catalog.core.uri_templates.parsing import InvalidTemplate, ParsedTemplate, parse_template
from catalog.core.uri_templates.scanner import MATCH_STEPS_PER_CHARACTER, MAX_MATCH_SHAPES
from catalog.core.uris import MAX_URI_BYTES, InvalidUri, normalize_uri
from tests.admin_support import ADMIN_TOKEN, API, assert_problem, bearer
from tests.mcp_helpers import MODERN, Served, mcp_settings, module_database, served

RED_TEAM = "test://logs/{year}-{month}-{day}-{slug}"


def work_bound(parsed: ParsedTemplate, uri: str) -> int:
    """What a match may read: a constant per character of the URI and of the template, for each
    shape the template can take."""
    return MATCH_STEPS_PER_CHARACTER * (len(uri) + len(parsed.template)) * len(parsed.matcher.shapes)


# --------------------------------------------------------------------------------------------------
# Generated templates and URIs

# Literal text that also occurs inside values and is every operator's separator or stop character.
_SEPARATORS = "-._~/,;=&"
_NAMES = ["a", "b", "c", "d", "e", "f"]
_OPERATORS = ["", "", "", "+", "#", ".", "/", ";", "?", "&"]


@st.composite
def templates(draw: st.DrawFn) -> str:
    """``test://h/`` then 1-5 expressions (any operator, 1-2 variables), literals of separators
    between them; a lead-less expression gets a literal before it, so few are refused."""
    names = iter(draw(st.permutations(_NAMES)))
    parts = ["test://h/"]
    greedy = False
    for _ in range(draw(st.integers(1, 5))):
        operator = draw(st.sampled_from(_OPERATORS))
        if operator in "+#" and operator:
            if greedy:
                operator = ""
            greedy = True
        literal = draw(
            st.text(alphabet=_SEPARATORS, min_size=0 if operator not in ("", "+") else 1, max_size=3)
        )
        parts.append(literal)
        size = draw(st.integers(1, 2))
        chosen = [next(names, None) for _ in range(size)]
        variables = [name for name in chosen if name is not None]
        if not variables:
            break
        parts.append("{" + operator + ",".join(variables) + "}")
    parts.append(draw(st.text(alphabet=_SEPARATORS, max_size=3)))
    return "".join(parts)


def parsed_or_skip(raw: str) -> ParsedTemplate:
    try:
        return parse_template(raw)
    except InvalidTemplate:
        assume(False)
        raise


@st.composite
def hostile_uris(draw: st.DrawFn, parsed: ParsedTemplate) -> str:
    """An expansion of ``parsed`` with a long run of one separator put in, and a near-miss tail:
    what made the backtracking matcher explore every split."""
    values = {name: draw(st.text(alphabet=_SEPARATORS + "x%", max_size=4)) for name in parsed.variable_names}
    expanded = parsed.uri_template.expand(values)
    run = draw(st.sampled_from(_SEPARATORS + "?#")) * draw(st.integers(50, 1800))
    cut = draw(st.integers(len(parsed.literal_prefix), len(expanded)))
    tail = draw(st.sampled_from(["", "/x", "!", "x", "-", ".", "?", "#", ";", "=", "&"]))
    return (expanded[:cut] + run + expanded[cut:] + tail)[:MAX_URI_BYTES]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(raw=templates(), data=st.data())
def test_matching_reads_each_character_a_bounded_number_of_times(raw: str, data: st.DataObject) -> None:
    """On generated templates and URIs with long runs of the characters literals and values share,
    the scan reads at most ``MATCH_STEPS_PER_CHARACTER`` characters per character of the URI and
    template, per shape: linear, where the regular expression it replaces backtracked."""
    parsed = parsed_or_skip(raw)
    uri = data.draw(hostile_uris(parsed))
    found, steps = match_steps(parsed, uri)
    assert steps <= work_bound(parsed, uri), (raw, len(uri), steps)
    assert found == match(parsed, uri)


@pytest.mark.parametrize("run", ["-", ".", "_", "~", "/", ",", ";", "=", "&", "%"])
def test_the_red_team_template_reads_hostile_uris_in_linear_work(run: str) -> None:
    """``test://logs/{year}-{month}-{day}-{slug}`` and a URI of n separators with a near-miss end:
    the work doubles when n doubles (the backtracking matcher's grew as n**3: 3.2 s at 260)."""
    parsed = parse_template(RED_TEAM)
    work = {}
    for size in (250, 500, 1000, 2000):
        uri = "test://logs/" + run * size + "/x"
        found, work[size] = match_steps(parsed, uri)
        assert found is None
        assert work[size] <= work_bound(parsed, uri)
    assert work[2000] <= 2 * work[1000] + 64 and work[1000] <= 2 * work[500] + 64


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(10, 120),
    operator=st.sampled_from(["", ".", "/", ";"]),
    separator=st.sampled_from("-._~=,"),
    run=st.sampled_from("-._~=,/;"),
    size=st.integers(100, 1900),
    tail=st.sampled_from(["", "x", "/x", "-x", ".", "?"]),
)
def test_the_work_does_not_grow_with_the_number_of_variables(
    count: int, operator: str, separator: str, run: str, size: int, tail: str
) -> None:
    """Up to 120 variables (a 2048-byte template holds about 400) against a run of separators: the
    work stays within the per-character bound, so it does not grow as ``len(uri) * variables``
    (what the SDK's scan costs, each variable re-reading the run back to its stop)."""
    lead = "" if operator else separator
    raw = "test://h/" + lead.join("{" + operator + f"v{i}" + "}" for i in range(count))
    parsed = parse_template(raw)
    uri = ("test://h/" + run * size + tail)[:MAX_URI_BYTES]
    found, steps = match_steps(parsed, uri)
    assert steps <= work_bound(parsed, uri), (raw, uri, steps)
    assert_agrees_with_the_sdk(parsed, uri, found)


def assert_agrees_with_the_sdk(parsed: ParsedTemplate, uri: str, ours: dict[str, str] | None) -> None:
    """A URI the SDK's ``UriTemplate.match`` reads gets the SDK's values; one it does not read
    matches only with an optional variable undefined (RES-15)."""
    theirs = parsed.uri_template.match(uri)
    if theirs is not None:
        assert ours == theirs, (parsed.template, uri)
    elif ours is not None:
        undefined = set(parsed.variable_names) - parsed.query_variable_names - set(ours)
        assert undefined, (parsed.template, uri, ours)


def _reference(raw: str) -> re.Pattern[str]:
    """The plain reference for a template of simple expressions: its regular expression, each value
    any run of characters a simple value's expansion never leaves unencoded (what this module
    matched with before, and backtracked on)."""
    pattern = []
    position = 0
    for expression in re.finditer(r"\{([a-z,]+)\}", raw):
        pattern.append(re.escape(raw[position : expression.start()]))
        pattern.append(",".join("([^/?#&,]*)" for _ in expression.group(1).split(",")))
        position = expression.end()
    pattern.append(re.escape(raw[position:]))
    return re.compile("".join(pattern), re.DOTALL)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(raw=templates(), data=st.data())
def test_matching_agrees_with_the_sdk_and_with_the_plain_reference(raw: str, data: st.DataObject) -> None:
    """A URI the SDK's ``UriTemplate.match`` reads gets the SDK's values; a URI the SDK does not
    read matches only with an optional variable undefined (RES-15); and on a template of simple
    expressions, a URI the backtracking reference matches gets the reference's values (the
    ambiguous splits resolve as its greedy groups do: the first value longest)."""
    parsed = parsed_or_skip(raw)
    sdk = parsed.uri_template
    values = {
        name: data.draw(st.text(alphabet=_SEPARATORS + "x%", max_size=4)) for name in sdk.variable_names
    }
    expanded = sdk.expand(values)
    cut = data.draw(st.integers(len(parsed.literal_prefix), len(expanded)))
    uris = [
        expanded,
        expanded[:cut] + data.draw(st.text(alphabet=_SEPARATORS + "x", max_size=3)) + expanded[cut:],
        parsed.literal_prefix + data.draw(st.text(alphabet=_SEPARATORS + "x?#", max_size=14)),
    ]
    simple = re.fullmatch(r"[^{}]*(\{[a-z,]+\}[^{}]*)+", raw) is not None
    for uri in uris:
        ours = match(parsed, uri)
        assert_agrees_with_the_sdk(parsed, uri, ours)
        if simple:
            reference = _reference(raw).fullmatch(uri)
            expected = (
                None
                if reference is None
                else dict(zip(parsed.variable_names, map(unquote, reference.groups()), strict=True))
            )
            assert ours == expected, (raw, uri)
        names = tuple(reversed(parsed.variable_names))
        assert match_values(parsed, uri, names) == (None if ours is None else [ours.get(n) for n in names])


# Values whose expansion is canonical and never holds a separator of any operator.
_PLAIN_VALUES = st.text(alphabet="xyz é", max_size=3)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(raw=templates(), data=st.data())
def test_every_expansion_of_a_creatable_template_reads_back_res_15(raw: str, data: st.DataObject) -> None:
    """RES-15: a template the admin API accepts reads back every URI it expands to, whichever of its
    variables are left undefined (RFC 6570 then omits the expression's lead character too): the
    match expands to the same URI, and an undefined optional variable is absent from it."""
    parsed = parsed_or_skip(raw)
    try:
        check_readable(parsed)
    except InvalidTemplate:
        assume(False)
    defined = {name: data.draw(_PLAIN_VALUES) for name in parsed.variable_names if data.draw(st.booleans())}
    uri = parsed.uri_template.expand(defined)
    try:
        assume(normalize_uri(uri) == uri)
    except InvalidUri:
        assume(False)
    found = match(parsed, uri)
    assert found is not None, (raw, uri)
    assert parsed.uri_template.expand(found) == uri, (raw, uri, found)


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("test://x/{id}{.ext}", "test://x/readme", {"id": "readme"}),
        ("test://x/{id}{.ext}", "test://x/readme.md", {"id": "readme", "ext": "md"}),
        ("test://x/{id}{.ext}", "test://x/a.tar.gz", {"id": "a.tar", "ext": "gz"}),
        ("test://x{/seg}", "test://x", {}),
        ("test://x{/seg}", "test://x/", {"seg": ""}),
        ("test://x/{id}{/y}{.ext}", "test://x/a.json", {"id": "a", "ext": "json"}),
        ("test://x/{id}{/y}{.ext}", "test://x/a/b", {"id": "a", "y": "b"}),
        ("test://x/{id}{;v}", "test://x/a", {"id": "a"}),
        ("test://x/{id}{;v}", "test://x/a;v", {"id": "a", "v": ""}),
        ("test://x/{id}{;p,q}", "test://x/a;q=2", {"id": "a", "q": "2"}),
        ("test://x/{id}{#frag}", "test://x/a", {"id": "a"}),
        ("test://x/{id}{#frag}", "test://x/a#top", {"id": "a", "frag": "top"}),
        ("test://x/{+path}{.ext}", "test://x/a/b", {"path": "a/b"}),
        ("test://x/{id}{?q,lang}", "test://x/7", {"id": "7"}),
        ("test://x/{a,b}/z", "test://x/1/z", None),  # stored before: matched with both defined
    ],
)
def test_undefined_optional_variables_match_as_absent_res_15(
    template: str, uri: str, expected: dict[str, str] | None
) -> None:
    assert match(template, uri) == expected


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("test://x/{a,b}/z", "{a,b} has several variables"),
        ("test://x{/a,b}", "{/a,b} has several variables"),
        ("test://x/{id}{.a,b}", "{.a,b} has several variables"),
        ("test://x/{id}{;a,b,c,d,e}", "32 combinations"),
        ("test://x/{id}{/a}{/b}{/c}{/d}{/e}", "32 combinations"),
        # Found by the property above: ';a=x=' read as an empty a, then '=', then b = 'x='.
        ("test://h/{;a}={b};{c};{d};{+e}", "{;a} can be followed by '='"),
        ("test://x/{;a}{.b}=x", "{;a} can be followed by '='"),
    ],
)
def test_templates_whose_expansions_could_not_be_read_are_refused_res_15(template: str, reason: str) -> None:
    with pytest.raises(InvalidTemplate) as info:
        check_readable(template)
    assert reason in info.value.reason


def test_a_template_at_the_shape_limit_is_accepted() -> None:
    template = parse_template("test://x/{id}{/a}{/b}{/c}{/d}")
    check_readable(template)
    assert len(template.matcher.shapes) == MAX_MATCH_SHAPES
    assert match(template, "test://x/i/1/2") == {"id": "i", "a": "1", "b": "2"}


# --------------------------------------------------------------------------------------------------
# Through the admin API and an MCP read


on_session_loop = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            yield s


async def create_template(srv: Served, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=srv.base_url, headers=bearer(ADMIN_TOKEN)) as admin:
        return await admin.post(f"{API}/tenants/demo/templates", json=body)


@on_session_loop
async def test_a_hostile_read_through_a_curators_template_is_not_found_after_linear_work_res_17(
    srv: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The red team's case: a curator's ordinary template with a body, and an anonymous read of
    ``test://logs/`` + 2000 dashes + ``/x`` answers the normal not-found error, the match having
    read a bounded number of characters per character (the backtracking matcher took 3.2 s at 260
    dashes and 50 s at 400, on the event loop, holding a pooled connection)."""
    created = await create_template(
        srv,
        {
            "uriTemplate": RED_TEAM,
            "name": "logs",
            "mimeType": "text/plain",
            "text": "{year}/{month}/{day} {slug}",
        },
    )
    assert created.status_code == 201, created.text
    work: list[tuple[str, str, int]] = []

    def counted(template: ParsedTemplate, uri: str) -> dict[str, str] | None:
        found, steps = match_steps(template, uri)
        work.append((template.template, uri, steps))
        return found

    monkeypatch.setattr(reading, "match", counted)
    hostile = "test://logs/" + "-" * 2000 + "/x"
    async with srv.client(MODERN) as client:
        with pytest.raises(MCPError) as err:
            await client.read_resource(hostile)
        assert err.value.code == -32602
        assert err.value.error.message == "Resource not found"
        assert err.value.error.data == {"uri": hostile}
        result = await client.read_resource("test://logs/2026-12-05-notes")
    [item] = result.contents
    assert isinstance(item, types.TextResourceContents) and item.text == "2026/12/05 notes"
    [(template, uri, steps), _] = work
    assert (template, uri) == (RED_TEAM, hostile)
    assert steps <= work_bound(parse_template(RED_TEAM), hostile)


@on_session_loop
async def test_optional_expressions_read_with_the_variable_undefined_res_15(srv: Served) -> None:
    """RES-15: ``test://docs/{name}{.ext}`` expanded without ``ext`` is ``test://docs/readme``; the
    admin API accepts the template and an MCP read of either expansion renders its body."""
    created = await create_template(
        srv,
        {
            "uriTemplate": "test://docs/{name}{.ext}{/part}",
            "name": "docs",
            "mimeType": "text/plain",
            "text": "name={name} ext={ext} part={part}",
        },
    )
    assert created.status_code == 201, created.text
    async with srv.client(MODERN) as client:
        texts = {}
        for uri in (
            "test://docs/readme",
            "test://docs/readme.md",
            "test://docs/readme/intro",
            "test://docs/a.b/c",
        ):
            [item] = (await client.read_resource(uri)).contents
            assert isinstance(item, types.TextResourceContents)
            texts[uri] = item.text
    assert texts == {
        "test://docs/readme": "name=readme ext= part=",
        "test://docs/readme.md": "name=readme ext=md part=",
        "test://docs/readme/intro": "name=readme ext= part=intro",
        "test://docs/a.b/c": "name=a ext=b part=c",
    }


@on_session_loop
@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("test://pairs/{a,b}", "{a,b} has several variables"),
        ("test://pairs/{id}{/a,b}", "{/a,b} has several variables"),
        ("test://pairs/{id}{;a,b,c,d,e}", "32 combinations"),
    ],
)
async def test_templates_with_unreadable_expansions_are_refused_at_creation_res_15(
    srv: Served, template: str, reason: str
) -> None:
    """RES-15: a template one of whose expansions could not be read back is refused with a 422
    naming ``/uriTemplate``, and nothing is created."""
    refused = await create_template(srv, {"uriTemplate": template, "name": "pairs", "text": "x"})
    problem = assert_problem(refused, 422, "/uriTemplate")
    assert any(reason in error["detail"] for error in problem["errors"]), problem
    async with httpx.AsyncClient(base_url=srv.base_url, headers=bearer(ADMIN_TOKEN)) as admin:
        listed = (await admin.get(f"{API}/tenants/demo/templates")).json()
    assert template not in [t["uriTemplate"] for t in listed["items"]]
