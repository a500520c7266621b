"""Start-up: what ``catalog serve`` (and every command) imports, and when.

A warm ``catalog serve`` is mostly Python imports, so what is deferred is pinned here: the core and
the CLI never import the MCP SDK or alembic, the schema's revision and the scripts' head are read
without alembic, the embedded PostgreSQL starts while the app is imported, and the cyclic collector
stays out of the way until the server has started.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from catalog import runtime
from catalog.bootstrap import _alongside
from catalog.db import migrate

pytestmark = pytest.mark.process


def imported_by(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has imported after running ``code``."""
    shown = "import sys; print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))"
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{shown}"], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stdout.split())


def test_the_core_and_the_cli_never_import_the_mcp_sdk_or_alembic() -> None:
    """Any ``mcp.*`` import runs the SDK's ``__init__`` (client and server): a command that parses
    no template, and ``catalog --help``, must not pay for it; alembic only when a schema moves."""
    loaded = imported_by(
        "import catalog.core.catalog, catalog.bootstrap, catalog.cli, catalog.auth, catalog.events\n"
        "from catalog.cli import build_parser; build_parser()"
    )
    assert "catalog" in loaded
    assert not loaded & {"mcp", "mcp_types", "alembic", "fastapi"}


def test_the_app_imports_pyjwt_only_to_verify_a_jwt() -> None:
    """No OAuth configured, no JWT ever verified: PyJWT and its cryptography are not loaded."""
    loaded = imported_by("from catalog.serving import import_app; import_app()")
    assert "mcp" in loaded and "jwt" not in loaded


def test_catalog_help_imports_neither_sqlalchemy_nor_pydantic() -> None:
    loaded = imported_by("from catalog.cli import build_parser; build_parser().format_help()")
    assert {"sqlalchemy", "pydantic", "pydantic_settings", "fastapi", "mcp"}.isdisjoint(loaded)
    assert "argparse" in loaded


def test_parsing_a_template_imports_the_sdk_it_parses_with() -> None:
    loaded = imported_by(
        "from catalog.core.uri_templates.parsing import parse_template\n"
        "assert parse_template('test://x/{id}').match('test://x/7') == {'id': '7'}"
    )
    assert "mcp" in loaded


def test_the_scripts_head_is_read_without_alembic_and_is_alembics() -> None:
    assert migrate.linear_head(migrate.scripts_location() / "versions") == migrate.alembic_head()
    assert migrate.head_revision() == migrate.alembic_head()
    loaded = imported_by("from catalog.db import migrate; print(migrate.head_revision())")
    assert "alembic" not in loaded


def write_script(versions: Path, name: str, body: str) -> None:
    versions.mkdir(exist_ok=True)
    (versions / f"{name}.py").write_text(f'"""{name}"""\n\nfrom alembic import op\n\n{body}\n')


@pytest.mark.parametrize(
    ("scripts", "head"),
    [
        ({"a": 'revision = "a"\ndown_revision = None', "b": 'revision: str = "b"\ndown_revision = "a"'}, "b"),
        # Anything but one straight line is alembic's to answer (or refuse).
        ({"a": 'revision = "a"\ndown_revision = None', "b": 'revision = "b"\ndown_revision = None'}, None),
        (
            {
                "a": 'revision = "a"\ndown_revision = None',
                "b": 'revision = "b"\ndown_revision = "a"',
                "c": 'revision = "c"\ndown_revision = "a"',
            },
            None,
        ),
        (
            {"a": 'revision = "a"\ndown_revision = None', "m": 'revision = "m"\ndown_revision = ("a", "x")'},
            None,
        ),
        ({"a": 'revision = "a"\ndown_revision = None\nbranch_labels = ("x",)'}, None),
        ({"a": 'revision = "a"\ndown_revision = None\ndepends_on = "z"'}, None),
        ({"a": 'revision = "a"\ndown_revision = None', "b": 'revision = "b"\ndown_revision = "gone"'}, None),
        ({"a": "revision = make()\ndown_revision = None"}, None),
        ({"a": 'revision = "a"\ndown_revision = None', "b": 'revision = "b"\ndown_revision = "b"'}, None),
        ({}, None),
    ],
)
def test_only_a_straight_line_of_scripts_has_a_head_read_without_alembic(
    tmp_path: Path, scripts: dict[str, str], head: str | None
) -> None:
    (tmp_path / "versions").mkdir()
    for name, body in scripts.items():
        write_script(tmp_path / "versions", name, body)
    assert migrate.linear_head(tmp_path / "versions") == head


async def test_the_current_revision_is_read_without_alembic(
    empty_database_url: str, database_url: str
) -> None:
    assert await migrate.current_revision(empty_database_url) is None
    assert await migrate.current_revision(database_url) == migrate.head_revision()


def test_the_database_starts_alongside_and_an_interrupted_start_up_still_waits_for_it() -> None:
    started = threading.Event()
    order: list[str] = []

    def start() -> str:
        started.wait(10)
        time.sleep(0.05)
        order.append("database")
        return "url"

    def meanwhile() -> None:
        started.set()  # runs while the start is under way, in this thread
        order.append("imports")

    assert _alongside(start, meanwhile) == "url" and order == ["imports", "database"]

    order.clear()

    def interrupted() -> None:
        started.set()
        raise SystemExit(143)  # SIGTERM while the app is imported

    with pytest.raises(SystemExit):
        _alongside(start, interrupted)
    assert order == ["database"]  # finished first, so the caller can release what it started

    def failed() -> str:
        raise RuntimeError("initdb failed")

    with pytest.raises(RuntimeError, match="initdb failed"):
        _alongside(failed, lambda: None)


def test_the_collector_is_paused_until_the_server_has_settled_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_settled", True)  # this test process keeps its own heap unfrozen
    assert gc.isenabled()
    with runtime.collector_paused():
        assert not gc.isenabled()
        runtime.settle_garbage_collector()
        assert gc.isenabled()
    assert gc.isenabled()
    with runtime.collector_paused():  # a start-up that failed before the server started
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with runtime.collector_paused():  # off already: left off
            runtime.settle_garbage_collector()
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_paused_start_up_freezes_its_imports_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settling collection then walks only what start-up made after the imports."""
    monkeypatch.setattr(runtime, "_settled", False)  # as in a fresh process
    freezes: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(1))
    runtime.freeze_start_up_imports()  # the collector was never paused: not for us to freeze
    assert freezes == []
    with runtime.collector_paused():
        runtime.freeze_start_up_imports()
        assert freezes == [1]
        monkeypatch.setattr(runtime, "_settled", True)  # once settled, never again
        runtime.freeze_start_up_imports()
        assert freezes == [1]
