"""``CATALOG_MCP_FAST_PATH=shadow``: the SDK's handlers answer again what the fast path answered.

The fast path (``catalog.mcp.fast``) must answer exactly as the SDK's handlers would: the same
JSON-RPC response, byte for byte once serialised canonically. In shadow mode the edge
(``catalog.mcp.asgi``) lets the fast path answer into a buffer, runs the same request through the
SDK path with a copy of its ASGI scope (its answer kept, never sent), compares the two, and only
then sends the fast path's answer: a request costs both paths, and when its client has the answer,
any difference is already logged at WARNING, starting with :data:`MARKER` (the tests fail a served
process that prints it), and counted in ``catalog_mcp_fast_path_differences_total{method}``.

The second run must change nothing that matters: the requests shadowed are reads, list pages and
completions, which write nothing (a read needing consent is never answered on the fast path); the
copy of the scope carries no request record (the request's log line and metrics count it once,
``catalog.observability.mcp`` skips a shadow run) and no caller (the address's rate and
failed-authentication budgets are not spent twice, ``catalog.auth.quotas``). Listen streams are not
shadowed: what a stream sends depends on when events arrive, so two streams cannot be compared;
``CATALOG_MCP_FAST_PATH=off`` serves them on the SDK path instead.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Message, Scope, Send

from catalog.auth.quotas import CALLER_SCOPE_KEY
from catalog.mcp.context import PRINCIPAL_STATE_KEY, SHADOW_STATE_KEY, UNAVAILABLE_STATE_KEY
from catalog.observability import metrics
from catalog.observability.context import SCOPE_KEY

logger = logging.getLogger("catalog.mcp.shadow")

MARKER = "MCP-FAST-PATH-DIFFERENCE"
_MAX_DIFFERENCES = 8  # a compact log line: the first few paths that differ
_MAX_VALUE = 120


@dataclass
class Captured:
    """``send`` that keeps an HTTP response instead of sending it."""

    messages: list[Message] = field(default_factory=list)

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int | None:
        return next((m["status"] for m in self.messages if m["type"] == "http.response.start"), None)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")

    async def send_to(self, send: Send) -> None:
        for message in self.messages:
            await send(message)


def shadow_scope(scope: Scope) -> Scope:
    """A copy of ``scope`` for the SDK path's second run: its own state, no request record, no
    caller whose budgets it could spend."""
    copy = {key: value for key, value in scope.items() if key not in (SCOPE_KEY, CALLER_SCOPE_KEY)}
    state = {
        key: value
        for key, value in scope.get("state", {}).items()
        if key not in (PRINCIPAL_STATE_KEY, UNAVAILABLE_STATE_KEY)  # what the fast run left
    }
    copy["state"] = {**state, SHADOW_STATE_KEY: True}
    return copy


def _parsed(status: int | None, body: bytes) -> Any:
    """An answer as compared: its status and its body parsed as JSON (the raw text if it is not)."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = {"unparsed": body.decode("utf-8", "replace")}
    return {"status": status, "body": parsed}


def canonical(value: Any) -> str:
    """One serialisation for equal JSON values: sorted keys, no spaces, no escaping of non-ASCII."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _short(value: Any) -> str:
    text = canonical(value)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def differences(fast: Any, sdk: Any, path: str = "") -> list[str]:
    """Where two JSON values differ: ``path: fast != sdk`` for each differing leaf, in order."""
    if isinstance(fast, dict) and isinstance(sdk, dict):
        found: list[str] = []
        for key in sorted(fast.keys() | sdk.keys()):
            here = f"{path}/{key}"
            if key not in sdk:
                found.append(f"{here}: only fast {_short(fast[key])}")
            elif key not in fast:
                found.append(f"{here}: only sdk {_short(sdk[key])}")
            else:
                found.extend(differences(fast[key], sdk[key], here))
        return found
    if isinstance(fast, list) and isinstance(sdk, list) and len(fast) == len(sdk):
        return [
            line
            for i, (a, b) in enumerate(zip(fast, sdk, strict=True))
            for line in differences(a, b, f"{path}/{i}")
        ]
    if canonical(fast) == canonical(sdk):
        return []
    return [f"{path or '/'}: fast {_short(fast)} != sdk {_short(sdk)}"]


def compare(method: str, fast: Captured, sdk: Captured) -> list[str]:
    """Compare the two answers to one request; log and count a difference. The differences found."""
    found = differences(_parsed(fast.status, fast.body), _parsed(sdk.status, sdk.body))
    if found:
        metrics.MCP_FAST_PATH_DIFFERENCES.labels(metrics.method_label(method)).inc()
        shown = "; ".join(found[:_MAX_DIFFERENCES])
        more = f" (and {len(found) - _MAX_DIFFERENCES} more)" if len(found) > _MAX_DIFFERENCES else ""
        logger.warning("%s %s: %s%s", MARKER, method, shown, more)
    return found


def sdk_failed(method: str, exc: BaseException) -> None:
    """The SDK path raised where the fast path answered: a difference too."""
    metrics.MCP_FAST_PATH_DIFFERENCES.labels(metrics.method_label(method)).inc()
    logger.warning("%s %s: the fast path answered, the SDK path raised %r", MARKER, method, exc)
