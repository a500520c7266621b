"""A plain completion's statements: BEGIN with the scope, the scan (whose first statement also
authenticates the credential and checks the template), COMMIT; for a credential whose visibility is
not yet remembered, its authentication and grants first. An unknown template costs no more, and it
and a refused argument are still left to the full path, whose errors are the same as before."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import asyncpg
import pytest

from catalog.core.catalog import Catalog
from catalog.core.direct.completion import (
    InvalidArgument,
    UnknownTemplate,
    complete_argument,
    fast_completion,
)
from catalog.core.grants import create_grant
from catalog.core.principal import Principal
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tenants import Tenant
from catalog.core.tokens import create_token, delete_token, list_tokens
from catalog.db.engine import create_engine
from catalog.settings import Settings
from tests.db.test_completion_skip_scan import TEMPLATE, tree_tenant

SYSTEM = Principal.system("tests")
# Each value's first URI matches the template: the loose index scan is one statement.
URIS = ["test://tree/a/x", "test://tree/a/y", "test://tree/b/z"]
STATEMENT_METHODS = ("execute", "fetch", "fetchrow", "fetchval")


@pytest.fixture
async def catalog(settings: Settings) -> AsyncIterator[Catalog]:
    # One pooled connection: the statements counted are all on it, none of them a new one's set-up.
    engine = create_engine(
        settings.async_database_url(), pool_size=1, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    yield Catalog(engine=engine, settings=settings)
    await engine.dispose()


@pytest.fixture
async def tenant(catalog: Catalog) -> Tenant:
    """A tenant holding the template and ``URIS``."""
    return await tree_tenant(catalog, URIS)


@pytest.fixture
async def token(catalog: Catalog, tenant: Tenant) -> str:
    """An admin token of ``tenant``."""
    return (await create_token(catalog, SYSTEM, tenant, TokenIn(admin=True))).token


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every statement the test's own thread sends on a bare asyncpg driver while the
    test runs (not the statements of the test harness's threads: tests/clones.py)."""
    sent: list[str] = []
    test_thread = threading.get_ident()
    for name in STATEMENT_METHODS:
        original = getattr(asyncpg.Connection, name)

        async def counted(self: asyncpg.Connection, query: str, *args: Any, _original: Any = original) -> Any:
            if threading.get_ident() == test_thread:
                sent.append(query)
            return await _original(self, query, *args)

        monkeypatch.setattr(asyncpg.Connection, name, counted)
    yield sent


async def _counted(statements: list[str], completing: Awaitable[Any]) -> tuple[Any, list[str]]:
    """What ``completing`` answered, and the statements it sent."""
    statements.clear()
    completed = await completing
    return completed, list(statements)


async def _counted_completion(
    catalog: Catalog, statements: list[str], token: str, template: str, argument: str, **known: str
) -> tuple[Any, list[str]]:
    """A plain completion of a credential whose visibility is remembered (by a completion before),
    and the statements it sent."""
    await fast_completion(catalog, TEMPLATE, "dir", "", token=token)
    return await _counted(
        statements, fast_completion(catalog, template, argument, "", known or None, token=token)
    )


@pytest.mark.parametrize(
    ("argument", "known", "values"),
    [("dir", {}, ["a", "b"]), ("file", {"dir": "a"}, ["x", "y"])],  # the loose index scan; a row scan
)
async def test_a_plain_completion_is_three_statements_authenticated_and_template_checked_by_the_scan(
    catalog: Catalog,
    token: str,
    statements: list[str],
    argument: str,
    known: dict[str, str],
    values: list[str],
) -> None:
    completed, sent = await _counted_completion(catalog, statements, token, TEMPLATE, argument, **known)
    assert completed is not None and completed.completion.values == values
    assert len(sent) == 3, sent  # BEGIN and the scope; authentication, grants and the scan; COMMIT
    assert sent[0].startswith("BEGIN") and sent[2] == "COMMIT"
    assert all(name in sent[1] for name in ("catalog_plain_read", "templates", "resources"))


async def test_an_authenticated_principals_completion_rides_on_its_scan_too(
    catalog: Catalog, tenant: Tenant, statements: list[str]
) -> None:
    """A principal the edge authenticated (an OAuth access token): its tenant, scopes and admin
    flag are what the statement checks the grants of."""
    await create_grant(catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "s", "tag": "tree"}))
    await create_grant(
        catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "s", "uriPrefix": "test://tree/b/"})
    )
    reader = Principal(kind="jwt", tenant_id=tenant.id, tenant_slug=tenant.slug, scopes=frozenset({"s", "t"}))
    first = await fast_completion(catalog, TEMPLATE, "dir", "", principal=reader)
    completed, sent = await _counted(
        statements, fast_completion(catalog, TEMPLATE, "dir", "", principal=reader)
    )
    assert first == completed and completed is not None
    assert completed.principal == reader and completed.completion.values == ["b"] and len(sent) == 3


async def test_a_credentials_first_completion_authenticates_first(
    catalog: Catalog, token: str, statements: list[str]
) -> None:
    """Its visibility is not known yet: the authentication and grants, then BEGIN, the scan (the
    template checked by it), COMMIT."""
    completed, sent = await _counted(statements, fast_completion(catalog, TEMPLATE, "dir", "", token=token))
    assert completed is not None and completed.completion.values == ["a", "b"]
    if catalog.settings.behind_pooler:
        # A pooler keeps the session's settings (its statement_timeout) only inside a transaction:
        # the self-scoped authentication gets one of its own, two round trips more.
        assert sent[0].startswith("BEGIN; SELECT set_config('statement_timeout'") and sent[2] == "COMMIT", (
            sent
        )
        sent = sent[1:2] + sent[3:]
    assert len(sent) == 4 and "catalog_plain_read" in sent[0] and "templates" in sent[2], sent


async def test_an_unknown_template_or_a_refused_argument_is_left_to_the_full_path(
    catalog: Catalog, token: str, statements: list[str]
) -> None:
    unknown = "test://nowhere/{dir}/{file}"
    completed, sent = await _counted_completion(catalog, statements, token, unknown, "dir")
    assert completed is None and len(sent) == 3, sent
    refused, sent = await _counted_completion(catalog, statements, token, TEMPLATE, "nope")
    assert refused is None and sent == []  # refused whatever the catalogue holds


async def test_a_revoked_token_is_refused_on_its_next_completion(
    catalog: Catalog, tenant: Tenant, token: str
) -> None:
    assert await fast_completion(catalog, TEMPLATE, "dir", "", token=token) is not None
    assert await fast_completion(catalog, TEMPLATE, "dir", "", token=token) is not None  # remembered
    (victim,) = await list_tokens(catalog, tenant)
    await delete_token(catalog, SYSTEM, tenant, victim.id)
    assert await fast_completion(catalog, TEMPLATE, "dir", "", token=token) is None


async def test_changed_grants_show_on_the_next_completion(
    catalog: Catalog, tenant: Tenant, statements: list[str]
) -> None:
    """The scan read with the remembered visibility is discarded when the grants the statement
    returned make another one: the completion is asked again with the right one."""
    await create_grant(
        catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "s", "uriPrefix": "test://tree/a/"})
    )
    await create_grant(catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "s", "tag": "tree"}))
    reader = (await create_token(catalog, SYSTEM, tenant, TokenIn(scopes=["s"]))).token
    completed = await fast_completion(catalog, TEMPLATE, "dir", "", token=reader)
    assert completed is not None and completed.completion.values == ["a"]
    await create_grant(
        catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "s", "uriPrefix": "test://tree/b/"})
    )
    completed, sent = await _counted(statements, fast_completion(catalog, TEMPLATE, "dir", "", token=reader))
    assert completed is not None and completed.completion.values == ["a", "b"]
    assert len(sent) == 6, sent  # the guess's three, then BEGIN, the scan, COMMIT
    completed, sent = await _counted(statements, fast_completion(catalog, TEMPLATE, "dir", "", token=reader))
    assert completed is not None and completed.completion.values == ["a", "b"] and len(sent) == 3


async def test_the_full_paths_errors_are_unchanged(catalog: Catalog, token: str) -> None:
    """Unknown before refused: an argument the template lacks is refused only once the template is
    known to be visible."""
    completed = await fast_completion(catalog, TEMPLATE, "dir", "", token=token)
    assert completed is not None
    principal = completed.principal
    with pytest.raises(UnknownTemplate):
        await complete_argument(catalog, principal, "test://nowhere/{dir}", "dir", "")
    with pytest.raises(UnknownTemplate):
        await complete_argument(catalog, principal, "test://nowhere/{dir}", "nope", "")
    with pytest.raises(InvalidArgument):
        await complete_argument(catalog, principal, TEMPLATE, "nope", "")
