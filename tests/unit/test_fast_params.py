"""The fast path asks the SDK whether it accepts a request's params (``validate_client_request``)
and keeps the verdict per canonical JSON of method, version and params: a kept verdict is always
the SDK's own (ERR-3 and the one-executor rule of docs/architecture.md)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types.methods import validate_client_request

from catalog.mcp import fast

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def sdk_verdict(method: str, version: object, params: dict[str, Any]) -> bool:
    try:
        validate_client_request(method, version, params)  # type: ignore[arg-type]
    except (ValueError, KeyError):
        return False
    return True


@pytest.fixture(autouse=True)
def fresh_verdicts() -> None:
    fast._ACCEPTED_PARAMS.clear()


CASES = [
    ("resources/read", MODERN, {"uri": "file:///a", "_meta": ENVELOPE}),
    (
        "resources/read",
        MODERN,
        {"uri": "file:///a", "_meta": {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": 5}},
    ),
    (
        "resources/read",
        MODERN,
        {"uri": "file:///a", "_meta": {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": "x"}},
    ),
    ("resources/read", MODERN, {"uri": 7, "_meta": ENVELOPE}),
    ("resources/list", MODERN, {"cursor": None, "_meta": ENVELOPE}),
    ("resources/read", "1999-01-01", {"uri": "file:///a", "_meta": ENVELOPE}),
    ("resources/read", {}, {"uri": "file:///a", "_meta": ENVELOPE}),
    ("resources/read", MODERN, {"uri": "file:///a", "_meta": {**ENVELOPE, "n": 2**70}}),  # no key
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_the_verdict_asked_again_is_the_sdks_own(case: tuple[str, Any, dict[str, Any]]) -> None:
    method, version, params = case
    expected = sdk_verdict(method, version, params)
    assert [fast.sdk_accepts(method, version, params) for _ in range(3)] == [expected] * 3


def test_the_known_cases_include_a_refusal_and_an_acceptance() -> None:
    assert {sdk_verdict(*case) for case in CASES} == {True, False}  # the cases above prove both ways


def test_key_order_does_not_split_a_verdict_and_the_kept_verdicts_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    params = {"uri": "file:///a", "_meta": ENVELOPE}
    assert fast.sdk_accepts("resources/read", MODERN, params)
    assert fast.sdk_accepts(
        "resources/read", MODERN, {"_meta": dict(reversed(ENVELOPE.items())), "uri": "file:///a"}
    )
    assert len(fast._ACCEPTED_PARAMS) == 1
    monkeypatch.setattr(fast, "ACCEPTED_PARAMS_KEPT", 3)
    for n in range(10):
        fast.sdk_accepts("resources/read", MODERN, {"uri": f"file:///{n}", "_meta": ENVELOPE})
    assert 1 <= len(fast._ACCEPTED_PARAMS) <= 3


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    method=st.sampled_from(["resources/read", "resources/list", "completion/complete"]),
    uri=st.one_of(st.just("file:///a"), json_values),
    capabilities=st.one_of(st.just({}), json_values),
    extra=st.dictionaries(st.sampled_from(["cursor", "ref", "argument", "x"]), json_values, max_size=2),
)
def test_any_params_get_the_sdks_verdict_first_time_and_again(
    method: str, uri: Any, capabilities: Any, extra: dict[str, Any]
) -> None:
    params = {
        "uri": uri,
        **extra,
        "_meta": {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": capabilities},
    }
    expected = sdk_verdict(method, MODERN, params)
    assert fast.sdk_accepts(method, MODERN, params) is expected
    assert fast.sdk_accepts(method, MODERN, params) is expected
