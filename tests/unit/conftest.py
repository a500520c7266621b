"""tests/unit: pure tests, no database. They run (``pytest tests/unit``) where no PostgreSQL is
reachable and none may be started; a test here that asks for one fails, naming the tier to move
it to, instead of starting an embedded server."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def postgres_server() -> None:
    pytest.fail("tests/unit uses no database: a test that needs one belongs in tests/db or tests/e2e")
