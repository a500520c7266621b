"""How a failing test reads, and how long reading it takes, when its exception is an exception group.

Every SDK client a test opens wraps what passes through it in its task group's exception group, so a
stream test failing inside 32 clients raises a group nested 32 deep: Python displays 10 levels, and
the report showed groups without the assertion inside. Two hooks (registered by ``conftest``):

* a failing test's report gets the distinct exceptions at the bottom of its group, each once, with
  its traceback;
* schemathesis' ``pytest_exception_interact`` runs for schemathesis' own tests only. It deduplicates
  a group by walking it along every ``__context__`` path, which grows exponentially with such
  nesting: one failing stream test held a CI run there for over ten minutes.
"""

from __future__ import annotations

import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

SCHEMATHESIS_PLUGIN = "schemathesis.pytest.plugin"
MAX_SHOWN = 5


def innermost(group: BaseExceptionGroup[Any]) -> Iterator[BaseException]:
    """The exceptions at the bottom of ``group``, each once (a group may hold one several times)."""
    seen: set[int] = set()
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(reversed(exc.exceptions))
        else:
            yield exc


def innermost_report(group: BaseExceptionGroup[Any]) -> str:
    shown: dict[tuple[str, str], str] = {}
    for exc in innermost(group):
        key = (type(exc).__qualname__, str(exc))
        if key not in shown and len(shown) < MAX_SHOWN:
            shown[key] = "".join(traceback.format_exception(exc))
    return "\n".join(shown.values())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, BaseExceptionGroup):
        report.sections.append(("the exceptions inside the group", innermost_report(call.excinfo.value)))
    return report


def pytest_configure(config: pytest.Config) -> None:
    for hook in config.hook.pytest_exception_interact.get_hookimpls():
        plugin = hook.plugin
        if isinstance(plugin, types.ModuleType) and plugin.__name__ == SCHEMATHESIS_PLUGIN:
            hook.function = _for_schemathesis_tests_only(hook.function)  # type: ignore[misc]


def _for_schemathesis_tests_only(hook: Callable[..., None]) -> Callable[..., None]:
    from schemathesis.pytest.plugin import SchemathesisFunction

    def pytest_exception_interact(node: pytest.Item, call: pytest.CallInfo[Any], report: Any) -> None:
        if isinstance(node, SchemathesisFunction):
            hook(node, call, report)

    return pytest_exception_interact
