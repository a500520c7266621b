"""schemathesis against /openapi.json: every admin operation, generated inputs, as the platform admin.

No answer may be a 5xx, and every answer must be one the document declares (status code, content
type, body and headers): the OpenAPI document is a contract clients generate code from.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from catalog.app import create_app
from catalog.settings import Settings
from tests.admin_support import ADMIN, ADMIN_TOKEN
from tests.conftest import LiveServer, run_live_server

pytestmark = pytest.mark.slow

# never started.
_DOCUMENT = create_app(
    Settings(database_url="postgresql+asyncpg://unused@localhost/unused", admin_token=ADMIN_TOKEN)
).openapi()
schema = schemathesis.openapi.from_dict(_DOCUMENT).include(path_regex="^/admin/v1/")

TENANT = "acme"
# uvicorn's own answer to a request its HTTP parser refuses (bytes no request target may hold).
UVICORN_REFUSAL = "Invalid HTTP request received."


def _not_a_server_error(ctx: object, response: object, case: object) -> bool:
    status = response.status_code  # type: ignore[attr-defined]
    assert status < 500, f"{status} for {case}: {response.text[:500]}"  # type: ignore[attr-defined]
    return True


@pytest.fixture
def live(settings: Settings, tmp_path: Path) -> Iterator[LiveServer]:
    with run_live_server(create_app(settings)) as server:
        with httpx.Client(base_url=server.base_url, headers=ADMIN, timeout=30) as http:
            assert http.post("/admin/v1/tenants", json={"slug": TENANT}).status_code == 201
            created = http.post(
                f"/admin/v1/tenants/{TENANT}/resources",
                json={"uri": "test://seed", "name": "seed", "text": "x"},
            )
            assert created.status_code == 201
        yield server


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
    derandomize=True,
)
def test_admin_operations_never_5xx_and_answer_as_documented(
    case: schemathesis.Case, live: LiveServer
) -> None:
    if "slug" in (case.path_parameters or {}) and case.path_parameters["slug"].startswith("a"):
        case.path_parameters["slug"] = TENANT  # reach a real tenant often enough to exercise the routes
    response = case.call(base_url=live.base_url, headers=ADMIN)
    if response.status_code == 400 and response.text == UVICORN_REFUSAL:
        return  # the HTTP server refused the request line before the app saw it (not the API's answer)
    case.validate_response(
        response,
        checks=[
            _not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            response_headers_conformance,
        ],
    )
