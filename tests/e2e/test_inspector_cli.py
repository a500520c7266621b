"""The official MCP Inspector's CLI mode (``@modelcontextprotocol/inspector --cli``, pinned to
:data:`INSPECTOR_VERSION`) against ``catalog serve --workers 2`` as a process, with a scoped bearer
token passed as a ``--header``: ``tools/list`` shows the three read-only tools, ``tools/call``
``read_resource`` returns a resource's text, a URI the token may not see gets the very tool error a
missing one gets, ``resources/list`` / ``resources/read`` answer within the token's grants (and the
Inspector follows ``resources/list``'s cursors to the end), an invalid token is refused; in
both eras the Inspector negotiates (``--protocol-era legacy``: a 2025-11-25 session; ``modern``:
2026-07-28, stateless). The token's grant is what makes the header visible: an anonymous caller
would see, and read, the demo tenant's public resources.

The Inspector needs Node >= 22.19. Node 22 and the Inspector are installed once into the cache
``scripts/conformance.sh`` uses (``$CATALOG_CONFORMANCE_CACHE``, default
``~/.cache/catalog-conformance``: ``node22/`` shared with that script, ``inspector-<version>/``),
never into the repository; the tests are skipped, saying why, when npm cannot reach its registry.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.mcp.test_mcp_tools import serve_env
from tests.mcp_helpers import BULK, HIDDEN, Fixture, mcp_settings, module_database, seed
from tests.processes import Served, serving, started

INSPECTOR_VERSION = "2.12.0"
NODE_MAJOR = 22
CACHE = Path(os.environ.get("CATALOG_CONFORMANCE_CACHE") or Path.home() / ".cache" / "catalog-conformance")
NODE = CACHE / f"node{NODE_MAJOR}" / "node_modules" / "node" / "bin" / "node"
INSPECTOR_DIR = CACHE / f"inspector-{INSPECTOR_VERSION}"
INSPECTOR_PACKAGE = INSPECTOR_DIR / "node_modules" / "@modelcontextprotocol" / "inspector"
INSPECTOR_BIN = INSPECTOR_PACKAGE / "clients" / "launcher" / "build" / "index.js"
# What npm prints when it cannot reach the registry (no network, no DNS, a proxy refusing).
UNREACHABLE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH")

SCOPED = "src"  # the token whose one grant is the prefix file:///project/src (tests.mcp_helpers.seed)
APP = "file:///project/src/app.py"
APP_TEXT = 'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n'
MAIN = "file:///project/src/main.py"
GRANTED = ["file:///project/src", APP, MAIN]
OUTSIDE = "test://static-text"  # exists, outside the token's grant
MISSING = "file:///project/src/no-such-file.py"
TOOL_NAMES = {"search_resources", "list_resources", "read_resource"}
ERAS = ["legacy", "modern"]


# -- installing Node 22 and the Inspector into the cache ---------------------------------------------


def node_ok() -> bool:
    if not NODE.exists():
        return False
    ran = subprocess.run([str(NODE), "--version"], capture_output=True, text=True)
    return ran.returncode == 0 and ran.stdout.startswith(f"v{NODE_MAJOR}.")


def inspector_ok() -> bool:
    package = INSPECTOR_PACKAGE / "package.json"
    return (
        INSPECTOR_BIN.exists()
        and package.exists()
        and json.loads(package.read_text())["version"] == INSPECTOR_VERSION
    )


def npm_install_into(npm: str, dest: Path, spec: str) -> None:
    """``npm install`` into a fresh prefix moved into place, as ``scripts/conformance.sh`` does (an
    interrupted install leaves nothing half-done); skip when the registry cannot be reached."""
    tmp = dest.with_name(f"{dest.name}.tmp.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ran = subprocess.run(
        [npm, "install", "--prefix", str(tmp), "--no-audit", "--no-fund", "--loglevel=error", spec],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if ran.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        printed = ran.stdout + ran.stderr
        if any(code in printed for code in UNREACHABLE):
            pytest.skip(f"npm cannot reach its registry to install {spec}: {printed.strip()[-300:]}")
        pytest.fail(f"npm install {spec} failed:\n{printed}")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


@pytest.fixture(scope="module")
def inspector() -> Path:
    """The Inspector's launcher (``mcp-inspector``), installed once into the cache."""
    if node_ok() and inspector_ok():
        return INSPECTOR_BIN
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: it is needed to install Node 22 and the MCP Inspector")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".install.lock", "w") as lock:  # the lock scripts/conformance.sh takes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not node_ok():
            npm_install_into(npm, NODE.parents[3], f"node@{NODE_MAJOR}")
        assert node_ok(), f"node@{NODE_MAJOR} did not install a working {NODE}"
        if not inspector_ok():
            npm_install_into(npm, INSPECTOR_DIR, f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}")
        assert inspector_ok(), f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION} did not install"
    return INSPECTOR_BIN


# -- the server ----------------------------------------------------------------------------------------


@dataclass
class Server:
    served: Served
    fixture: Fixture


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Server]:
    """``catalog serve --workers 2`` over the seeded demo catalogue (``tests.mcp_helpers.seed``)."""
    async with module_database(postgres_server, template_database) as url:
        home = Path(tmp_path_factory.mktemp("inspector"))
        fixture = await seed(mcp_settings(url, home))
        with serving("--workers", "2", env=serve_env(url, home / "home")) as served:
            await asyncio.to_thread(started, served, 2)
            yield Server(served, fixture)


@dataclass
class Inspected:
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> Any:
        """The answer's ``result`` (``--format json`` prints ``{"result": …}``), after exit 0."""
        assert self.returncode == 0, f"exit {self.returncode}\nstdout: {self.stdout}\nstderr: {self.stderr}"
        return json.loads(self.stdout)["result"]


@pytest.fixture
def inspect(inspector: Path, srv: Server, tmp_path: Path) -> Iterator[Any]:
    """``inspect(era, *args)`` runs ``mcp-inspector --cli URL --transport http --header
    'Authorization: Bearer …' --format json ARGS`` with the scoped token; ``inspect(era, args, args,
    …)`` runs several at once; ``token=`` sends another bearer token (each start of the Inspector loads a large bundle: a few seconds on a
    busy machine). Its files (catalog, client config, OAuth store) go to a temporary HOME."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{NODE.parent}:{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "MCP_CATALOG_PATH": str(home / "mcp.json"),
        "MCP_CLIENT_CONFIG_PATH": str(home / "client.json"),
        "NO_COLOR": "1",
    }

    def one(era: str, args: tuple[str, ...], token: str) -> Inspected:
        bearer = f"Authorization: Bearer {token}"
        command = [str(NODE), str(inspector), "--cli", srv.served.mcp_url, "--transport", "http"]
        command += ["--header", bearer, "--protocol-era", era, "--format", "json", "--stored-auth-only"]
        ran = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=60)
        return Inspected(ran.returncode, ran.stdout, ran.stderr)

    def run(era: str, *args: Any, token: str = srv.fixture.tokens[SCOPED]) -> Any:
        if all(isinstance(arg, str) for arg in args):
            return one(era, args, token)
        with ThreadPoolExecutor(len(args)) as pool:
            return list(pool.map(lambda each: one(era, each, token), args))

    yield run


# -- the tests -----------------------------------------------------------------------------------------

SERVER_INFO = "io.modelcontextprotocol/serverInfo"  # in a 2026-07-28 result's _meta only


def read_tool(uri: str) -> tuple[str, ...]:
    return ("--method", "tools/call", "--tool-name", "read_resource", "--tool-arg", f"uri={uri}")


def in_era(result: dict[str, Any], era: str) -> dict[str, Any]:
    """The result, after checking it was answered in ``era``: a 2026-07-28 result names the server
    in its ``_meta`` (each request stands alone), a 2025-11-25 session's does not."""
    meta = result.pop("_meta", {})
    assert (SERVER_INFO in meta) == (era == "modern"), meta
    return result


@pytest.mark.parametrize("era", ERAS)
def test_tools_list_shows_the_three_read_only_tools(inspect: Any, era: str) -> None:
    tools = inspect(era, "--method", "tools/list").result["tools"]
    assert {t["name"] for t in tools} == TOOL_NAMES
    for listed in tools:
        assert listed["annotations"]["readOnlyHint"] is True
        assert listed["inputSchema"]["type"] == listed["outputSchema"]["type"] == "object"


@pytest.mark.parametrize("era", ERAS)
def test_read_resource_tool_returns_the_resources_text(inspect: Any, era: str) -> None:
    result = in_era(inspect(era, *read_tool(APP)).result, era)
    content = {"uri": APP, "mimeType": "text/x-python", "text": APP_TEXT}
    assert result == {
        "content": [{"type": "resource", "resource": content}],
        "structuredContent": {"uri": APP, "contents": [content], "truncated": False},
        "isError": False,
    }


@pytest.mark.parametrize("era", ERAS)
def test_a_uri_outside_the_tokens_grant_gets_the_missing_uris_tool_error(inspect: Any, era: str) -> None:
    """``test://static-text`` exists but the ``src`` token may not see it: the Inspector shows the
    same tool error (exit 5, ``isError``) as for a URI nothing is stored at, but for the URI."""
    outside, missing = inspect(era, read_tool(OUTSIDE), read_tool(MISSING))
    assert outside.returncode == missing.returncode == 5, (outside, missing)
    assert outside.stderr == missing.stderr
    assert json.loads(outside.stderr)["error"]["code"] == "tool_is_error"
    said = {
        uri: in_era(json.loads(ran.stdout)["result"], era)
        for uri, ran in [(OUTSIDE, outside), (MISSING, missing)]
    }
    for uri, result in said.items():
        assert result == {
            "content": [{"type": "text", "text": f"Resource not found: {uri}"}],
            "isError": True,
        }


@pytest.mark.parametrize("era", ERAS)
def test_resources_list_shows_only_the_tokens_grant(inspect: Any, era: str) -> None:
    result = inspect(era, "--method", "resources/list").result
    assert [r["uri"] for r in result["resources"]] == GRANTED
    assert "nextCursor" not in result


@pytest.mark.parametrize("era", ERAS)
def test_resources_list_follows_every_cursor(inspect: Any, srv: Server, era: str) -> None:
    """The Inspector's ``resources/list`` walks all pages (it prints only ``resources``): the
    ``staff`` token's 250 bulk resources are three pages of 100, each cursor handed back."""
    listed = inspect(era, "--method", "resources/list", token=srv.fixture.tokens["staff"]).result
    uris = [r["uri"] for r in listed["resources"]]
    assert len(uris) == len(set(uris)) and HIDDEN in uris
    assert [u for u in uris if u.startswith("test://bulk/")] == [f"test://bulk/{i:04d}" for i in range(BULK)]


@pytest.mark.parametrize("era", ERAS)
def test_resources_read_returns_the_text_and_hides_what_the_token_may_not_see(inspect: Any, era: str) -> None:
    read, outside, missing = inspect(
        era,
        ("--method", "resources/read", "--uri", APP),
        *[("--method", "resources/read", "--uri", uri) for uri in (OUTSIDE, MISSING)],
    )
    result = in_era(read.result, era)
    assert result["contents"] == [{"uri": APP, "mimeType": "text/x-python", "text": APP_TEXT}]
    assert outside.returncode == missing.returncode == 1 and outside.stdout == missing.stdout == ""
    assert outside.stderr == missing.stderr
    assert json.loads(outside.stderr) == {"error": {"code": "error", "message": "Resource not found"}}


@pytest.mark.parametrize("era", ERAS)
def test_an_invalid_token_is_auth_required_without_an_oauth_prompt(inspect: Any, era: str) -> None:
    """catalog's 401 reaches the Inspector as one: with ``--stored-auth-only`` it stops with
    ``auth_required`` (exit 3) instead of starting an OAuth login."""
    refused = inspect(era, "--method", "tools/list", token="cat_no-such-token")
    assert (refused.returncode, refused.stdout) == (3, ""), refused
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "auth_required"
    said = "invalid_token" if era == "legacy" else "the server requires authorization (HTTP 401)"
    assert said in error["message"]
