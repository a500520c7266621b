"""A forged JWT whose ``alg`` names the other key family (AUTH-5, AUTH-10).

The JWKS holds an RSA and an EC key. An unsigned token with ``{"alg": "RS256", "kid": <the EC
key>}`` (or ES256 with the RSA key's kid, or any other mismatch) is an invalid token: 401 with a
``WWW-Authenticate`` challenge on the admin API and on ``/mcp``, never a 500 or a dropped
connection. Tokens signed properly with either key still pass.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from fastapi import FastAPI

from catalog.app import create_app
from catalog.settings import Settings
from tests.admin_support import ADMIN, API, running
from tests.mcp_helpers import envelope, modern_headers

ISSUER = "https://issuer.test"
AUDIENCE = "https://catalog.test/mcp"


class TwoFamilyIssuer:
    """An issuer whose JWKS holds one RSA (``rsa``), one EC P-256 (``ec``) and one Ed25519 key
    (``ed``), none of them naming its ``alg`` (as many issuers publish them)."""

    def __init__(self, directory: Path) -> None:
        self.keys: dict[str, Any] = {
            "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec": ec.generate_private_key(ec.SECP256R1()),
            "ed": ed25519.Ed25519PrivateKey.generate(),
        }
        to_jwk = {
            "rsa": jwt.algorithms.RSAAlgorithm.to_jwk,
            "ec": jwt.algorithms.ECAlgorithm.to_jwk,
            "ed": jwt.algorithms.OKPAlgorithm.to_jwk,
        }
        keys = [
            {**json.loads(to_jwk[kid](key.public_key())), "kid": kid, "use": "sig"}
            for kid, key in self.keys.items()
        ]
        self.jwks_path = directory / "jwks.json"
        self.jwks_path.write_text(json.dumps({"keys": keys}))

    @staticmethod
    def claims(**extra: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": ISSUER, "aud": AUDIENCE, "sub": "agent", "exp": now + 300, "tenant": "acme", **extra}

    def signed(self, kid: str, algorithm: str, **claims: Any) -> str:
        return jwt.encode(self.claims(**claims), self.keys[kid], algorithm=algorithm, headers={"kid": kid})


def forged(alg: str, kid: str) -> str:
    """A token with this header and a signature of junk (no key signed it)."""
    encode = jwt.utils.base64url_encode
    header = encode(json.dumps({"alg": alg, "typ": "JWT", "kid": kid}).encode())
    payload = encode(json.dumps(TwoFamilyIssuer.claims(scope="catalog:admin")).encode())
    return (header + b"." + payload + b"." + encode(b"\x00" * 64)).decode()


# Every accepted algorithm paired with a key of another family (or another curve).
MISMATCHES = [
    ("RS256", "ec"),
    ("PS256", "ec"),
    ("RS512", "ed"),
    ("ES256", "rsa"),
    ("ES384", "ec"),  # the EC key is P-256
    ("ES512", "ed"),
    ("EdDSA", "rsa"),
    ("EdDSA", "ec"),
]


@pytest.fixture
def issuer(tmp_path: Path) -> TwoFamilyIssuer:
    return TwoFamilyIssuer(tmp_path)


@pytest.fixture
async def app(settings: Settings, issuer: TwoFamilyIssuer) -> AsyncIterator[FastAPI]:
    configured = settings.model_copy(
        update={"oauth_issuer": ISSUER, "oauth_audience": AUDIENCE, "oauth_jwks": str(issuer.jwks_path)}
    )
    async with running(create_app(configured)) as application:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=ADMIN) as c:
            assert (await c.post(f"{API}/tenants", json={"slug": "acme"})).status_code == 201
        yield application


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def _mcp_list(http: httpx.AsyncClient, token: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
    headers = {**modern_headers("resources/list"), "Authorization": f"Bearer {token}"}
    return await http.post("/mcp", json=body, headers=headers)


@pytest.mark.parametrize(("alg", "kid"), MISMATCHES)
async def test_an_alg_of_another_key_family_is_401_on_the_admin_api_auth_5(
    http: httpx.AsyncClient, alg: str, kid: str
) -> None:
    response = await http.get(
        f"{API}/tenants/acme/resources", headers={"Authorization": f"Bearer {forged(alg, kid)}"}
    )
    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert "Traceback" not in response.text


@pytest.mark.parametrize(("alg", "kid"), MISMATCHES)
async def test_an_alg_of_another_key_family_is_401_on_mcp_auth_5(
    http: httpx.AsyncClient, alg: str, kid: str
) -> None:
    response = await _mcp_list(http, forged(alg, kid))
    assert response.status_code == 401, response.text
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert response.json()["error"] == "invalid_token"


@pytest.mark.parametrize(
    ("kid", "alg"), [("rsa", "RS256"), ("rsa", "PS384"), ("ec", "ES256"), ("ed", "EdDSA")]
)
async def test_tokens_signed_by_either_family_still_pass(
    http: httpx.AsyncClient, issuer: TwoFamilyIssuer, kid: str, alg: str
) -> None:
    token = issuer.signed(kid, alg, scope="catalog:admin")
    assert (
        await http.get(f"{API}/tenants/acme/resources", headers={"Authorization": f"Bearer {token}"})
    ).status_code == 200
    response = await _mcp_list(http, token)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["resources"] == []
