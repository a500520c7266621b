"""The suite's own failure reports (tests/failures.py): a test failing deep inside exception groups
is reported with the exception at the bottom, and promptly."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]

DEEPLY_GROUPED = """
def grouped(depth):
    if depth == 0:
        return AssertionError("the failure at the bottom")
    below = grouped(depth - 1)
    # Beside each group a sibling raised while handling it, as nested task groups leave them:
    # walking every context path visits 2**depth exceptions.
    sibling = RuntimeError(f"beside level {depth - 1}")
    sibling.__context__ = below
    return ExceptionGroup(f"level {depth}", [below, sibling])


def test_fails_deep_in_groups():
    raise grouped(40)
"""


def test_a_failure_deep_in_exception_groups_is_reported_with_its_innermost_exception_promptly(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(test_deep=DEEPLY_GROUPED)
    # schemathesis' plugin loads from its entry point, as in this suite; without tests.failures its
    # exception hook would walk 2**40 paths here and the run would time out.
    result = pytester.runpytest_subprocess("-p", "tests.failures", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "the exceptions inside the group" in text
    assert "AssertionError: the failure at the bottom" in text
