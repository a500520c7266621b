"""docs/requirements.toml, the protocol requirements as data, held to the suite both ways: every
requirement names the tests that prove it (each one a test function somewhere under tests/) or says
why none does, and each named test names that requirement back; every requirement a test names (in
its function name, ``..._res_17``, or its docstring, ``RES-17``) is in the manifest; and the
manifest lists exactly the checklist's IDs, at the checklist's levels, when the checklist
(``../shared/spec-2026-07-28.md``) is beside the clone. Pure: reads files, no database."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

# The repository's root, however deep under tests/ this file is moved.
ROOT = next(parent for parent in Path(__file__).resolve().parents if (parent / "pyproject.toml").is_file())
MANIFEST = ROOT / "docs" / "requirements.toml"
PREFIXES = (
    "RES",
    "PAG",
    "CACHE",
    "SUB",
    "MRTR",
    "META",
    "DISC",
    "COMP",
    "ERR",
    "HTTP",
    "STDIO",
    "AUTH",
    "COMPAT",
)
_ALTERNATIVES = "|".join(PREFIXES)
ID_IN_TEXT = re.compile(rf"\b({_ALTERNATIVES})-(\d+)\b")
ID_IN_NAME = re.compile(rf"(?:^|_)({_ALTERNATIVES.lower()})_(\d+)(?=_|$)")
SPEC_LINE = re.compile(rf"^- \*\*(({_ALTERNATIVES})-\d+)\*\* \[([^\]]+)\]", re.MULTILINE)
ENTRY_KEYS = {"level", "says", "tests", "reason", "note"}


def manifest() -> dict[str, dict[str, object]]:
    return tomllib.loads(MANIFEST.read_text(encoding="utf-8"))


def suite_tests() -> dict[str, str | None]:
    """Every test function under tests/ (module level, or a method of a class), by name: its
    docstring."""
    found: dict[str, str | None] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bodies = [tree.body] + [node.body for node in tree.body if isinstance(node, ast.ClassDef)]
        for body in bodies:
            for node in body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                    found[node.name] = ast.get_docstring(node)
    return found


def spec_path() -> Path | None:
    for candidate in (ROOT.parent / "shared", Path("/work/shared")):
        spec = candidate / "spec-2026-07-28.md"
        if spec.is_file():
            return spec
    return None


def test_every_requirement_has_tests_or_a_reason_and_nothing_else() -> None:
    entries = manifest()
    assert len(entries) > 100
    for requirement, entry in entries.items():
        assert ID_IN_TEXT.fullmatch(requirement), requirement
        assert set(entry) <= ENTRY_KEYS, (requirement, set(entry) - ENTRY_KEYS)
        assert isinstance(entry.get("level"), str) and entry["level"], requirement
        assert isinstance(entry.get("says"), str) and entry["says"], requirement
        tests = entry.get("tests", [])
        reason = entry.get("reason", "")
        assert isinstance(tests, list) and all(isinstance(name, str) for name in tests), requirement
        assert isinstance(reason, str), requirement
        assert tests or reason.strip(), f"{requirement} names no test and gives no reason"
        assert len(tests) == len(set(tests)), requirement


def test_every_named_test_exists_under_tests() -> None:
    functions = suite_tests()
    missing = {
        requirement: [name for name in entry.get("tests", []) if name not in functions]  # type: ignore[union-attr]
        for requirement, entry in manifest().items()
    }
    assert {requirement: names for requirement, names in missing.items() if names} == {}


def test_test_names_are_unique_across_the_suite() -> None:
    """The manifest names tests by function name alone, so no two test functions may share one."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                seen.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_every_requirement_a_test_names_is_in_the_manifest() -> None:
    entries = manifest()
    unknown: dict[str, set[str]] = {}
    for name, docstring in suite_tests().items():
        named = {f"{prefix.upper()}-{number}" for prefix, number in ID_IN_NAME.findall(name)}
        named |= {f"{prefix}-{number}" for prefix, number in ID_IN_TEXT.findall(docstring or "")}
        if named - set(entries):
            unknown[name] = named - set(entries)
    assert unknown == {}


def test_each_named_test_names_the_requirement_it_proves() -> None:
    """The other direction, for a reader of the test: a test the manifest names for a requirement
    names that requirement too, in its function name or its docstring."""
    functions = suite_tests()
    unnamed: dict[str, list[str]] = {}
    for requirement, entry in manifest().items():
        for name in entry.get("tests", []):  # type: ignore[union-attr]
            if name not in functions:
                continue  # test_every_named_test_exists_under_tests says so
            named = {f"{prefix.upper()}-{number}" for prefix, number in ID_IN_NAME.findall(name)}
            named |= {f"{prefix}-{number}" for prefix, number in ID_IN_TEXT.findall(functions[name] or "")}
            if requirement not in named:
                unnamed.setdefault(name, []).append(requirement)
    assert unnamed == {}


def test_the_id_patterns_read_names_and_docstrings_as_meant() -> None:
    assert ID_IN_NAME.findall("test_a_b_res_17_err_1") == [("res", "17"), ("err", "1")]
    assert ID_IN_NAME.findall("test_comp_6_compat_11_http_2") == [
        ("comp", "6"),
        ("compat", "11"),
        ("http", "2"),
    ]
    assert ID_IN_NAME.findall("test_top_100_values_of_a_resource_17") == []
    assert ID_IN_TEXT.findall("SUB-1..13, COMPAT-5/8 and RES-17's") == [
        ("SUB", "1"),
        ("COMPAT", "5"),
        ("RES", "17"),
    ]


def test_the_manifest_lists_exactly_the_checklists_requirements_at_its_levels() -> None:
    spec = spec_path()
    if spec is None:
        pytest.skip("the checklist spec-2026-07-28.md is not beside the clone (../shared) here")
    listed = {
        requirement: level for requirement, _, level in SPEC_LINE.findall(spec.read_text(encoding="utf-8"))
    }
    assert len(listed) > 100
    entries = manifest()
    assert list(entries) == list(listed)  # the same IDs, in the checklist's order
    assert {requirement: entry["level"] for requirement, entry in entries.items()} == listed


def test_every_rule_of_the_architecture_names_tests_that_exist() -> None:
    """docs/architecture.md's table "where each rule lives": each rule's Tests cell names test
    functions (by name, as the manifest does), and each of them exists."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    header = "| Rule | Module | Tests |"
    assert header in text
    table = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    functions = suite_tests()
    assert len(table) > 20
    for row in table:
        cells = [cell.strip() for cell in row.strip().strip("|").split(" | ")]
        named = re.findall(r"`(test_\w+)`", cells[-1])
        assert named, f"a rule names no test: {row[:80]}"
        assert [name for name in named if name not in functions] == [], row[:80]
