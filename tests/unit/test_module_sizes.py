"""No module of catalog/ is over 600 lines: a module that long is doing several jobs."""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 600
PACKAGE = Path(__file__).resolve().parents[2] / "catalog"


def module_lines() -> dict[str, int]:
    return {
        path.relative_to(PACKAGE.parent).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }


def test_no_module_is_over_600_lines() -> None:
    over = {name: lines for name, lines in module_lines().items() if lines > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines: {over}; split them along their seams"
