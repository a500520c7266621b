"""A plain completion's statements: the authentication and grants, BEGIN with the scope, the scan
(whose first statement also checks the template), COMMIT. An unknown template or a refused argument
costs no more and is still left to the full path, whose errors are the same as before."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from catalog.core.completion import (
    InvalidArgument,
    UnknownTemplate,
    complete_argument,
    plain_completion,
)
from catalog.core.principal import Principal
from catalog.core.resources import upsert_many
from catalog.core.schemas import ResourceIn, TemplateIn, TokenIn
from catalog.core.service import Catalog
from catalog.core.templates import create_template
from catalog.core.tenants import create_tenant
from catalog.core.tokens import create_token
from catalog.db.engine import create_engine
from catalog.settings import Settings

SYSTEM = Principal.system("tests")
TEMPLATE = "test://tree/{dir}/{file}"
# Each value's first URI matches the template: the loose index scan is one statement.
URIS = ["test://tree/a/x", "test://tree/a/y", "test://tree/b/z"]
STATEMENT_METHODS = ("execute", "fetch", "fetchrow", "fetchval")


@pytest.fixture
async def catalog(settings: Settings) -> AsyncIterator[Catalog]:
    # One pooled connection: the statements counted are all on it, none of them a new one's set-up.
    engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
    yield Catalog(engine=engine, settings=settings)
    await engine.dispose()


@pytest.fixture
async def token(catalog: Catalog) -> str:
    """An admin token of a tenant holding the template and ``URIS``."""
    tenant = await create_tenant(catalog, "tree", "Tree")
    await create_template(
        catalog, SYSTEM, tenant, TemplateIn.model_validate({"uriTemplate": TEMPLATE, "name": "t"})
    )
    bodies = [ResourceIn.model_validate({"uri": uri, "name": uri, "text": "x"}) for uri in URIS]
    await upsert_many(catalog, SYSTEM, tenant, bodies)
    return (await create_token(catalog, SYSTEM, tenant, TokenIn(admin=True))).token


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every statement sent on a bare asyncpg driver while the test runs."""
    sent: list[str] = []
    for name in STATEMENT_METHODS:
        original = getattr(asyncpg.Connection, name)

        async def counted(self: asyncpg.Connection, query: str, *args: Any, _original: Any = original) -> Any:
            sent.append(query)
            return await _original(self, query, *args)

        monkeypatch.setattr(asyncpg.Connection, name, counted)
    yield sent


async def _counted_completion(
    catalog: Catalog, statements: list[str], token: str, template: str, argument: str, **known: str
) -> tuple[Any, list[str]]:
    """A plain completion on a warm connection, and the statements it sent."""
    await plain_completion(catalog, TEMPLATE, "dir", "", token=token)  # the connection opened
    statements.clear()
    completed = await plain_completion(catalog, template, argument, "", known or None, token=token)
    return completed, list(statements)


@pytest.mark.parametrize(
    ("argument", "known", "values"),
    [("dir", {}, ["a", "b"]), ("file", {"dir": "a"}, ["x", "y"])],  # the loose index scan; a row scan
)
async def test_a_plain_completion_is_four_statements_the_template_checked_by_the_scan(
    catalog: Catalog,
    token: str,
    statements: list[str],
    argument: str,
    known: dict[str, str],
    values: list[str],
) -> None:
    completed, sent = await _counted_completion(catalog, statements, token, TEMPLATE, argument, **known)
    assert completed is not None and completed.completion.values == values
    assert len(sent) == 4, sent  # authentication and grants; BEGIN and the scope; the scan; COMMIT
    assert "catalog_plain_read" in sent[0] and sent[1].startswith("BEGIN") and sent[3] == "COMMIT"
    assert "templates" in sent[2] and "resources" in sent[2]


async def test_an_unknown_template_or_a_refused_argument_is_left_to_the_full_path(
    catalog: Catalog, token: str, statements: list[str]
) -> None:
    unknown = "test://nowhere/{dir}/{file}"
    completed, sent = await _counted_completion(catalog, statements, token, unknown, "dir")
    assert completed is None and len(sent) == 4, sent
    refused, sent = await _counted_completion(catalog, statements, token, TEMPLATE, "nope")
    assert refused is None and len(sent) == 4, sent  # the template checked on its own


async def test_the_full_paths_errors_are_unchanged(catalog: Catalog, token: str) -> None:
    """Unknown before refused: an argument the template lacks is refused only once the template is
    known to be visible."""
    completed = await plain_completion(catalog, TEMPLATE, "dir", "", token=token)
    assert completed is not None
    principal = completed.principal
    with pytest.raises(UnknownTemplate):
        await complete_argument(catalog, principal, "test://nowhere/{dir}", "dir", "")
    with pytest.raises(UnknownTemplate):
        await complete_argument(catalog, principal, "test://nowhere/{dir}", "nope", "")
    with pytest.raises(InvalidArgument):
        await complete_argument(catalog, principal, TEMPLATE, "nope", "")
