"""What operators script, as the admin API offers it: tokens, grants, templates, tenant deletion,
import rules and migrate's report -- through ``catalog``'s own ``main``, real PostgreSQL.

Every write goes through the core functions the admin API uses, so the audit log names the CLI
(``system:cli``) exactly where it would name an admin token.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from catalog.auth import authenticate
from catalog.bootstrap import open_catalog
from catalog.core.errors import Unauthenticated
from catalog.db.migrate import head_revision
from catalog.settings import get_settings
from tests.conftest import Run

Sql = Callable[..., list[asyncpg.Record]]


def rows(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.splitlines()]


def authenticates(token: str) -> bool:
    async def go() -> bool:
        async with open_catalog(get_settings(), pool_size=1) as catalog:
            try:
                return await authenticate(catalog, f"Bearer {token}") is not None
            except Unauthenticated:
                return False

    return asyncio.run(go())


def answer(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


# -- tokens ---------------------------------------------------------------------------------------


def test_token_list_shows_every_token_without_secrets_and_revoke_ends_one(cli: Run, sql: Sql) -> None:
    cli("tenant", "create", "acme")
    reader = cli("token", "create", "--tenant", "acme", "--scope", "read", "--name", "agent one").out.strip()
    admin = cli("token", "create", "--tenant", "acme", "--admin", "--expires-in", "1").out.strip()
    ids = [row["id"] for row in sql("SELECT id FROM tokens ORDER BY id")]

    listed = cli("token", "list", "--tenant", "acme")
    assert listed.code == 0 and listed.err == ""
    assert reader not in listed.out and admin not in listed.out
    (first, second) = rows(listed.out)
    assert first[:5] == [str(ids[0]), "live", "read", "no", ""] and first[6] == "agent one"
    assert second[:4] == [str(ids[1]), "live", "", "yes"] and second[6] == ""
    expires = datetime.fromisoformat(second[4])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=1))) < timedelta(minutes=1)
    assert all(datetime.fromisoformat(row[5]) <= datetime.now(UTC) for row in (first, second))

    assert authenticates(reader)
    revoked = cli("token", "revoke", "--tenant", "acme", str(ids[0]))
    assert (revoked.code, revoked.out) == (0, "")
    assert revoked.err == f"catalog: revoked token {ids[0]} of tenant acme\n"
    assert not authenticates(reader) and authenticates(admin)
    assert [row[1] for row in rows(cli("token", "list", "--tenant", "acme").out)] == ["revoked", "live"]

    again = cli("token", "revoke", "--tenant", "acme", str(ids[0]))
    assert (again.code, again.err) == (1, f"catalog: no live token {ids[0]}\n")
    audit = sql("SELECT action, target_id, principal FROM audit_log WHERE target_kind = 'token' ORDER BY id")
    assert [tuple(r) for r in audit] == [
        ("token.create", ids[0], "system:cli"),
        ("token.create", ids[1], "system:cli"),
        ("token.revoke", ids[0], "system:cli"),
    ]


def test_an_expired_token_is_listed_as_expired(cli: Run, sql: Sql) -> None:
    cli("tenant", "create", "acme")
    cli("token", "create", "--tenant", "acme", "--scope", "s")
    sql("UPDATE tokens SET expires_at = now() - interval '1 hour'")
    assert rows(cli("token", "list", "--tenant", "acme").out)[0][1] == "expired"


@pytest.mark.parametrize(
    ("flags", "warned"), [([], True), (["--scope", "read"], False), (["--admin"], False)]
)
def test_token_create_without_a_scope_warns_that_it_sees_nothing(
    cli: Run, flags: list[str], warned: bool
) -> None:
    cli("tenant", "create", "acme")
    result = cli("token", "create", "--tenant", "acme", *flags)
    assert result.code == 0 and result.out.startswith("cat_") and len(result.out.splitlines()) == 1
    warning = [line for line in result.err.splitlines() if "warning" in line]
    if warned:
        assert len(warning) == 1 and "sees nothing" in warning[0] and warning[0].startswith("catalog: ")
    else:
        assert warning == []


# -- grants ---------------------------------------------------------------------------------------


def test_grant_add_list_remove(cli: Run, sql: Sql) -> None:
    cli("tenant", "create", "acme")
    added = [
        cli("grant", "add", "--tenant", "acme", "--scope", "read", "--uri-prefix", "file:///docs/"),
        cli("grant", "add", "--tenant", "acme", "--scope", "read", "--uri", "test://one"),
        cli("grant", "add", "--tenant", "acme", "--scope", "team", "--tag", "public"),
    ]
    assert all(result.code == 0 for result in added)
    ids = [int(result.out) for result in added]  # the id alone, for a script to keep
    assert (
        added[0].err == f"catalog: grant {ids[0]} of tenant acme: scope read sees uriPrefix file:///docs/\n"
    )

    listed = rows(cli("grant", "list", "--tenant", "acme").out)
    assert [row[:4] for row in listed] == [
        [str(ids[0]), "read", "uriPrefix", "file:///docs/"],
        [str(ids[1]), "read", "uri", "test://one"],
        [str(ids[2]), "team", "tag", "public"],
    ]
    stored = sql("SELECT id, scope, uri, uri_prefix, tag FROM grants ORDER BY id")
    assert [tuple(r) for r in stored] == [
        (ids[0], "read", None, "file:///docs/", None),
        (ids[1], "read", "test://one", None, None),
        (ids[2], "team", None, None, "public"),
    ]

    twice = cli("grant", "add", "--tenant", "acme", "--scope", "read", "--uri", "test://one")
    assert (twice.code, twice.out, twice.err) == (1, "", "catalog: the same grant exists already\n")
    removed = cli("grant", "remove", "--tenant", "acme", str(ids[1]))
    assert (removed.code, removed.err) == (0, f"catalog: removed grant {ids[1]} of tenant acme\n")
    assert [row[0] for row in rows(cli("grant", "list", "--tenant", "acme").out)] == [
        str(ids[0]),
        str(ids[2]),
    ]
    gone = cli("grant", "remove", "--tenant", "acme", str(ids[1]))
    assert (gone.code, gone.err) == (1, f"catalog: no grant {ids[1]}\n")
    audit = sql("SELECT action, principal FROM audit_log WHERE target_kind = 'grant' ORDER BY id")
    assert [tuple(r) for r in audit] == [("grant.create", "system:cli")] * 3 + [
        ("grant.delete", "system:cli")
    ]


def test_a_grant_needs_one_selector_and_a_valid_uri(cli: Run) -> None:
    cli("tenant", "create", "acme")
    bad = cli("grant", "add", "--tenant", "acme", "--scope", "read", "--uri", "file:///a/../etc")
    assert bad.code == 1 and len(bad.err.splitlines()) == 1
    assert bad.err.startswith("catalog: invalid grant: /uri: ")
    with pytest.raises(SystemExit) as usage:  # argparse: exactly one selector is a usage rule
        cli("grant", "add", "--tenant", "acme", "--scope", "read")
    assert usage.value.code == 2


# -- templates ------------------------------------------------------------------------------------


def test_template_add_list_remove(cli: Run, sql: Sql, tmp_path: Path) -> None:
    cli("tenant", "create", "acme")
    body = tmp_path / "order.json"
    body.write_text('{"id": "{id}"}')
    first = cli(
        "template",
        "add",
        "--tenant",
        "acme",
        "test://orders/{id}",
        "--name",
        "order",
        "--mime-type",
        "application/json",
        "--tag",
        "shop",
        "--tag",
        "api",
        "--text-file",
        str(body),
    )
    second = cli("template", "add", "--tenant", "acme", "test://a/{x}", "--name", "a", "--text", "x={x}")
    assert first.code == 0 and second.code == 0
    ids = [int(first.out), int(second.out)]
    assert first.err == f"catalog: template {ids[0]} of tenant acme: test://orders/{{id}}\n"

    listed = rows(cli("template", "list", "--tenant", "acme").out)
    assert [row[:6] for row in listed] == [  # by URI template, byte order
        [str(ids[1]), "test://a/{x}", "a", "", "", "1"],
        [str(ids[0]), "test://orders/{id}", "order", "application/json", "api,shop", "1"],
    ]
    stored = sql("SELECT uri_template, literal_prefix, text FROM templates ORDER BY id")
    assert [tuple(r) for r in stored] == [
        ("test://orders/{id}", "test://orders/", '{"id": "{id}"}'),
        ("test://a/{x}", "test://a/", "x={x}"),
    ]

    taken = cli("template", "add", "--tenant", "acme", "test://a/{x}", "--name", "again")
    assert (taken.code, taken.err) == (1, "catalog: a template 'test://a/{x}' exists already\n")
    invalid = cli("template", "add", "--tenant", "acme", "test://b/{x", "--name", "b")
    assert invalid.code == 1 and invalid.err.startswith("catalog: invalid URI template (/uriTemplate: ")
    unknown_var = cli("template", "add", "--tenant", "acme", "test://c/{x}", "--name", "c", "--text", "{y}")
    assert unknown_var.code == 1 and unknown_var.err.startswith("catalog: invalid template body (/text: ")

    assert cli("template", "remove", "--tenant", "acme", str(ids[1])).code == 0
    assert [row[0] for row in rows(cli("template", "list", "--tenant", "acme").out)] == [str(ids[0])]
    missing = cli("template", "remove", "--tenant", "acme", str(ids[1]))
    assert (missing.code, missing.err) == (1, f"catalog: no template {ids[1]}\n")
    audit = sql("SELECT action, principal FROM audit_log WHERE target_kind = 'template' ORDER BY id")
    assert [r["action"] for r in audit] == ["template.create", "template.create", "template.delete"]
    assert {r["principal"] for r in audit} == {"system:cli"}


# -- tenant delete --------------------------------------------------------------------------------


def tenant_rows(sql: Sql) -> dict[str, int]:
    counts = sql(
        "SELECT (SELECT count(*) FROM tenants) tenants, (SELECT count(*) FROM resources) resources,"
        " (SELECT count(*) FROM grants) grants, (SELECT count(*) FROM tokens) tokens"
    )[0]
    return dict(counts)


def seeded(cli: Run, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.txt").write_text("a")
    cli("tenant", "create", "acme")
    cli("tenant", "create", "other")
    cli("import", "--tenant", "acme", str(root), "--no-progress")
    cli("grant", "add", "--tenant", "acme", "--scope", "s", "--tag", "t")
    cli("token", "create", "--tenant", "acme", "--scope", "s")


@pytest.mark.parametrize("reply", ["n\n", "\n", ""])
def test_tenant_delete_asks_and_anything_but_yes_changes_nothing(
    cli: Run, sql: Sql, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: str
) -> None:
    seeded(cli, tmp_path)
    before = tenant_rows(sql)
    answer(monkeypatch, reply)
    result = cli("tenant", "delete", "acme")
    assert result.code == 1 and result.out == ""
    assert result.err.startswith(
        "delete tenant acme and all its data (1 resources, 0 blobs, 0 templates, 1 grants, 1 tokens)? [y/N] "
    )
    assert result.err.endswith(
        "catalog: cancelled, nothing changed (pass --yes to confirm without a prompt)\n"
    )
    assert tenant_rows(sql) == before


@pytest.mark.parametrize("how", ["answer", "--yes"])
def test_tenant_delete_removes_the_tenant_and_all_its_rows(
    cli: Run, sql: Sql, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    seeded(cli, tmp_path)
    answer(monkeypatch, "y\n" if how == "answer" else "")
    result = cli("tenant", "delete", "acme", *(["--yes"] if how == "--yes" else []))
    assert (result.code, result.out) == (0, "")
    assert result.err.endswith(
        "catalog: deleted tenant acme (1 resources, 0 blobs, 0 templates, 1 grants, 1 tokens)\n"
    )
    assert ("[y/N]" in result.err) == (how == "answer")
    assert tenant_rows(sql) == {"tenants": 1, "resources": 0, "grants": 0, "tokens": 0}
    assert [r["slug"] for r in sql("SELECT slug FROM tenants")] == ["other"]


def test_deleting_an_unknown_tenant_is_one_line_and_asks_nothing(
    cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer(monkeypatch, "y\n")
    result = cli("tenant", "delete", "nope")
    assert (result.code, result.out, result.err) == (1, "", "catalog: no tenant 'nope'\n")


# -- import: prefix and ignore rules --------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for folder in (".git/objects", ".hg", ".svn", "src/__pycache__", "node_modules/x", "logs", ".jj"):
        (root / folder).mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "objects" / "ab").write_bytes(b"\x00blob")
    (root / ".hg" / "store").write_text("x")
    (root / ".svn" / "wc.db").write_text("x")
    (root / ".jj" / "repo").write_text("x")
    (root / "src" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\x00pyc")
    (root / "src" / "main.py").write_text("print(1)\n")
    (root / "node_modules" / "x" / "index.js").write_text("1")
    (root / "logs" / "app.log").write_text("noise")
    (root / "logs" / "keep.log").write_text("kept")
    (root / "README.md").write_text("# P\n")
    (root / "sub").mkdir()
    (root / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")  # a submodule's .git file
    (root / "sub" / "a.txt").write_text("a")
    return root


def uris(sql: Sql, slug: str) -> list[str]:
    found = sql("SELECT r.uri FROM resources r JOIN tenants t ON t.id = r.tenant_id WHERE t.slug = $1", slug)
    return sorted(r["uri"] for r in found)


def test_import_skips_version_control_and_bytecode_folders_by_default(
    cli: Run, sql: Sql, project: Path
) -> None:
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(project), "--no-progress")
    assert result.code == 0, result.err
    # .git, .hg, .svn, .jj, src/__pycache__ and sub/.git: six entries, none walked into.
    assert result.out == "11 created, 0 updated, 0 unchanged, 0 failed, 6 ignored\n"
    assert result.err == ""
    assert uris(sql, "acme") == [
        "file:///README.md",
        "file:///logs",
        "file:///logs/app.log",
        "file:///logs/keep.log",
        "file:///node_modules",
        "file:///node_modules/x",
        "file:///node_modules/x/index.js",
        "file:///src",
        "file:///src/main.py",
        "file:///sub",
        "file:///sub/a.txt",
    ]


def test_an_ignore_file_in_gitignore_syntax_leaves_out_what_it_names(
    cli: Run, sql: Sql, project: Path, tmp_path: Path
) -> None:
    rules = tmp_path / "ignore"
    rules.write_text("# build output\nnode_modules/\n*.log\n!keep.log\n/README.md\n!__pycache__/\n")
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(project), "--ignore-file", str(rules), "--no-progress")
    assert result.code == 0, result.err
    assert uris(sql, "acme") == [
        "file:///logs",
        "file:///logs/keep.log",
        "file:///src",
        "file:///src/__pycache__",  # re-included by '!__pycache__/'
        "file:///src/__pycache__/main.cpython-311.pyc",
        "file:///src/main.py",
        "file:///sub",
        "file:///sub/a.txt",
    ]
    # .git, .hg, .svn, .jj, sub/.git, node_modules, logs/app.log, README.md
    assert result.out.endswith(", 8 ignored\n")


def test_prefix_places_the_tree_under_another_uri(cli: Run, sql: Sql, project: Path) -> None:
    cli("tenant", "create", "acme")
    for prefix in ("repo://acme/main", "repo://acme/main/"):  # with or without the final slash
        result = cli("import", "--tenant", "acme", str(project / "sub"), "--prefix", prefix, "--no-progress")
        assert result.code == 0, result.err
    assert uris(sql, "acme") == ["repo://acme/main/a.txt"]
    placed = cli("import", "--tenant", "acme", str(project / "src"), "--prefix", "file:///projects/p%20one")
    assert placed.code == 0
    assert "file:///projects/p%20one/main.py" in uris(sql, "acme")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prefix", "file:///a/../b"], "catalog: --prefix: "),
        (["--prefix", "not a uri"], "catalog: --prefix: "),
        (["--ignore-file", "/nonexistent/ignore"], "catalog: /nonexistent/ignore: No such file or directory"),
    ],
)
def test_bad_import_options_are_one_line_before_anything_is_written(
    cli: Run, sql: Sql, project: Path, argv: list[str], message: str
) -> None:
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(project), *argv)
    assert result.code == 1 and result.out == "" and len(result.err.splitlines()) == 1
    assert result.err.startswith(message)
    assert uris(sql, "acme") == []


def test_prefix_and_ignore_file_refuse_a_jsonl_import(cli: Run, tmp_path: Path) -> None:
    dump = tmp_path / "in.jsonl"
    dump.write_text('{"uri": "test://a", "name": "a"}\n')
    cli("tenant", "create", "acme")
    result = cli("import", "--tenant", "acme", str(dump), "--prefix", "file:///x/")
    assert (result.code, result.err) == (
        1,
        "catalog: --prefix and --ignore-file apply to a directory import only\n",
    )


# -- migrate --------------------------------------------------------------------------------------


def test_migrate_says_what_it_did(
    empty_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from catalog.cli import main

    monkeypatch.setenv("CATALOG_DATABASE_URL", empty_database_url)
    monkeypatch.setenv("CATALOG_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    head = head_revision()

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(list(argv))
        return code, capsys.readouterr().out

    try:
        assert run("migrate") == (0, f"upgraded from an empty schema to {head}\n")
        assert run("migrate") == (0, f"already at head {head}\n")
        assert run("migrate", "upgrade") == (0, f"already at head {head}\n")
        assert run("migrate", "downgrade", "0001", "--yes") == (0, f"downgraded from {head} to 0001\n")
        assert run("migrate", "downgrade", "0001", "--yes") == (0, f"already at 0001 (head is {head})\n")
        assert run("migrate", "upgrade") == (0, f"upgraded from 0001 to {head}\n")
        assert run("migrate", "downgrade", "base", "--yes") == (
            0,
            f"downgraded from {head} to an empty schema\n",
        )
    finally:
        get_settings.cache_clear()
