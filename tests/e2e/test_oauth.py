"""JWT access tokens (AUTH-5, AUTH-6, AUTH-9): validated against issuer, audience and JWKS."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from catalog.auth import authenticate
from catalog.core.catalog import Catalog
from catalog.core.errors import Unauthenticated
from catalog.core.tenants import create_tenant
from catalog.db.engine import create_engine
from catalog.settings import Settings

ISSUER = "https://issuer.test"
AUDIENCE = "https://catalog.test/mcp"


class Issuer:
    def __init__(self, directory: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "key-1"
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks_path = directory / "jwks.json"
        self.jwks_path.write_text(
            json.dumps({"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]})
        )

    def token(
        self, *, key: Any = None, kid: str | None = None, algorithm: str = "RS256", **claims: Any
    ) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "agent-7", "iat": now, "exp": now + 300, **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key or self.key, algorithm=algorithm, headers={"kid": kid or self.kid})


def hs256_by_hand(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    """An HS256 JWT built without PyJWT, which (rightly) refuses to sign with a public key."""
    encode = jwt.utils.base64url_encode
    signing_input = encode(json.dumps(header).encode()) + b"." + encode(json.dumps(claims).encode())
    signature = encode(hmac.new(secret, signing_input, hashlib.sha256).digest())
    return (signing_input + b"." + signature).decode()


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    return Issuer(tmp_path)


@pytest.fixture
async def catalog(database_url: str, tmp_path: Path, issuer: Issuer) -> AsyncIterator[Catalog]:
    settings = Settings(
        database_url=database_url,
        home=tmp_path / "home",
        admin_token="cat_platform",
        secret_key="k" * 32,
        oauth_issuer=ISSUER,
        oauth_audience=AUDIENCE,
        oauth_jwks=str(issuer.jwks_path),
    )
    engine = create_engine(settings.async_database_url())
    catalog = Catalog(engine=engine, settings=settings)
    await create_tenant(catalog, "acme")
    try:
        yield catalog
    finally:
        await engine.dispose()


async def test_a_valid_jwt_maps_to_the_same_principal_as_an_opaque_token(
    catalog: Catalog, issuer: Issuer
) -> None:
    """AUTH-1 (docs/requirements.toml)."""
    principal = await authenticate(catalog, f"Bearer {issuer.token(tenant='acme', scope='reader docs')}")
    assert principal is not None
    assert (
        principal.kind,
        principal.tenant_slug,
        principal.scopes,
        principal.is_admin,
        principal.subject,
    ) == (
        "jwt",
        "acme",
        frozenset({"reader", "docs"}),
        False,
        "agent-7",
    )


async def test_the_admin_scope_makes_a_tenant_admin(catalog: Catalog, issuer: Issuer) -> None:
    """AUTH-9 (docs/requirements.toml)."""
    principal = await authenticate(catalog, f"Bearer {issuer.token(tenant='acme', scp=['catalog:admin'])}")
    assert principal is not None and principal.is_admin and principal.administers(principal.tenant_id or 0)
    assert principal.scopes == frozenset()


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": int(time.time()) - 3600}, "expired"),
        ({"nbf": int(time.time()) + 3600}, "not valid yet"),
        ({"aud": "https://other.test/mcp"}, "another resource"),
        ({"iss": "https://evil.test"}, "another issuer"),
        ({"exp": None}, "invalid"),
        ({"tenant": "nope"}, "names no tenant"),
        ({"tenant": None}, "names no tenant"),
    ],
)
async def test_tokens_outside_their_window_audience_or_issuer_are_refused(
    catalog: Catalog, issuer: Issuer, claims: dict[str, Any], reason: str
) -> None:
    """AUTH-5, AUTH-6 (docs/requirements.toml)."""
    token = issuer.token(**{"tenant": "acme", **claims})
    with pytest.raises(Unauthenticated) as info:
        await authenticate(catalog, f"Bearer {token}")
    assert reason in info.value.detail


async def test_a_jwt_without_a_subject_is_refused_so_callers_stay_apart(
    catalog: Catalog, issuer: Issuer
) -> None:
    """A token without ``sub`` is refused: such tokens were all one caller ("jwt:unknown"), sharing
    consent request state and the audit trail's name."""
    for sub in (None, "", "  "):
        with pytest.raises(Unauthenticated, match="no subject"):
            await authenticate(catalog, f"Bearer {issuer.token(tenant='acme', sub=sub)}")
    principal = await authenticate(catalog, f"Bearer {issuer.token(tenant='acme', sub='agent-9')}")
    assert principal is not None and principal.label == "jwt:agent-9"


@pytest.mark.parametrize(
    "audience", ["HTTPS://Catalog.Test/mcp", "https://CATALOG.test/mcp/", [AUDIENCE, "x"]]
)
async def test_the_audience_matches_with_scheme_and_host_in_any_case_auth_13(
    catalog: Catalog, issuer: Issuer, audience: object
) -> None:
    principal = await authenticate(catalog, f"Bearer {issuer.token(tenant='acme', aud=audience)}")
    assert principal is not None and principal.tenant_slug == "acme"
    for other in ("https://catalog.test/mcpx", "https://catalog.test/MCP", "https://other.test/mcp"):
        with pytest.raises(Unauthenticated, match="another resource"):
            await authenticate(catalog, f"Bearer {issuer.token(tenant='acme', aud=other)}")


async def test_a_token_signed_by_another_key_is_refused(catalog: Catalog, issuer: Issuer) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(Unauthenticated, match="invalid"):
        await authenticate(catalog, f"Bearer {issuer.token(key=stranger, tenant='acme')}")
    with pytest.raises(Unauthenticated, match="unknown key"):
        await authenticate(catalog, f"Bearer {issuer.token(kid='other', tenant='acme')}")


async def test_symmetric_and_unsigned_tokens_are_refused(catalog: Catalog, issuer: Issuer) -> None:
    # Algorithm confusion: an HS256 token keyed with the public key's text must not pass.
    public_pem = issuer.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    forged = hs256_by_hand(
        {"alg": "HS256", "typ": "JWT", "kid": issuer.kid},
        {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60, "tenant": "acme"},
        public_pem,
    )
    unsigned = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60, "tenant": "acme"},
        None,
        algorithm="none",
    )
    for token in (forged, unsigned):
        with pytest.raises(Unauthenticated, match="algorithm is not accepted"):
            await authenticate(catalog, f"Bearer {token}")


async def test_a_tampered_payload_is_refused(catalog: Catalog, issuer: Issuer) -> None:
    header, payload, signature = issuer.token(tenant="acme", scope="reader").split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["scope"] = "reader catalog:admin"
    forged_payload = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    with pytest.raises(Unauthenticated):
        await authenticate(catalog, f"Bearer {header}.{forged_payload}.{signature}")


async def test_without_oauth_settings_a_jwt_is_just_an_unknown_token(
    database_url: str, tmp_path: Path, issuer: Issuer
) -> None:
    settings = Settings(
        database_url=database_url, home=tmp_path / "h", admin_token="cat_p", secret_key="k" * 32
    )
    engine = create_engine(settings.async_database_url())
    try:
        with pytest.raises(Unauthenticated, match="invalid, expired or revoked"):
            await authenticate(
                Catalog(engine=engine, settings=settings), f"Bearer {issuer.token(tenant='acme')}"
            )
    finally:
        await engine.dispose()
