"""OAuth 2.1 resource server: JWT access tokens from a configured issuer, mapped to a principal.

A token is accepted only if it is signed by a key of the configured JWKS (a file, or an https URL),
with an asymmetric algorithm, names the configured issuer and audience (the canonical ``/mcp``
URL: RFC 8707), and is within its ``exp``/``nbf`` window. The tenant comes from a claim (default
``tenant``, a tenant slug); scopes from ``scope`` (space-separated) or ``scp`` (a list). The scope
``catalog:admin`` (configurable) makes the principal an admin of its tenant.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.auth.challenges import canonical_url
from catalog.core.errors import Unauthenticated
from catalog.core.principal import Principal
from catalog.core.service import Catalog

if TYPE_CHECKING:
    # PyJWT (and the parts of cryptography it loads, 0.03 s) is imported when a JWT is first
    # verified: a server that never sees one (no OAuth configured) never needs it.
    from jwt import PyJWK

# Each accepted algorithm and the JWK key type (``kty``) it verifies with. A token names its own
# algorithm; the key it names by ``kid`` must be of that family, else PyJWT is handed a key its
# algorithm cannot use (a TypeError, i.e. a 500, instead of a refused token).
KEY_TYPES = {
    "RS256": "RSA",
    "RS384": "RSA",
    "RS512": "RSA",
    "PS256": "RSA",
    "PS384": "RSA",
    "PS512": "RSA",
    "ES256": "EC",
    "ES384": "EC",
    "ES512": "EC",
    "EdDSA": "OKP",
}
ALGORITHMS = list(KEY_TYPES)
_JWKS_TTL_SECONDS = 300.0
_MIN_REFETCH_SECONDS = 30.0
_FILE_RECHECK_SECONDS = 5.0


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and not token.startswith("cat_")


@dataclass
class JwksSource:
    """Signing keys from a file (re-read when it changes) or a URL (cached, refetched on a new kid)."""

    location: str
    _keys: dict[str, PyJWK] = field(default_factory=dict)
    _declared_algs: dict[Any, Any] = field(default_factory=dict)
    _loaded_at: float = 0.0
    _mtime: float | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def is_url(self) -> bool:
        return self.location.startswith(("https://", "http://"))

    async def key(self, kid: str | None) -> PyJWK | None:
        await self._refresh(force=False)
        found = self._find(kid)
        if found is None and time.monotonic() - self._loaded_at > _MIN_REFETCH_SECONDS:
            await self._refresh(force=True)  # the issuer may have rotated its keys
            found = self._find(kid)
        return found

    def _find(self, kid: str | None) -> PyJWK | None:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    def fits(self, key: PyJWK, algorithm: str) -> bool:
        """Whether ``key`` may verify a token signed with ``algorithm``: the key is of that
        algorithm's family, and names that algorithm if it names one (RFC 7517 section 4.4). EC
        curves are checked by PyJWT itself (a mismatch is an ``InvalidKeyError``)."""
        declared = self._declared_algs.get(key.key_id)
        return key.key_type == KEY_TYPES.get(algorithm) and declared in (None, algorithm)

    async def _refresh(self, *, force: bool) -> None:
        async with self._lock:
            if self.is_url:
                stale = time.monotonic() - self._loaded_at > _JWKS_TTL_SECONDS
                if self._keys and not stale and not force:
                    return
                document = await self._fetch()
            else:
                # A file is looked at again at most every few seconds, off the event loop.
                if self._keys and not force and time.monotonic() - self._loaded_at < _FILE_RECHECK_SECONDS:
                    return
                mtime, document = await asyncio.to_thread(self._read_file)
                if document is None:
                    self._loaded_at = time.monotonic()
                    return
                self._mtime = mtime
            from jwt import PyJWKSet

            keys = PyJWKSet.from_dict(document).keys
            self._keys = {key.key_id or f"#{index}": key for index, key in enumerate(keys)}
            # The ``alg`` each key names, if any (PyJWK fills in a default when it names none).
            self._declared_algs = {
                raw.get("kid"): raw.get("alg") for raw in document.get("keys", []) if isinstance(raw, dict)
            }
            self._loaded_at = time.monotonic()

    def _read_file(self) -> tuple[float, dict[str, Any] | None]:
        path = Path(self.location)
        mtime = path.stat().st_mtime
        if self._keys and mtime == self._mtime:
            return mtime, None
        return mtime, json.loads(path.read_text())

    async def _fetch(self) -> dict[str, Any]:
        import httpx

        async with httpx.AsyncClient(timeout=5.0, follow_redirects=False) as client:
            response = await client.get(self.location)
            response.raise_for_status()
            return response.json()


@dataclass
class JwtVerifier:
    issuer: str
    audience: str
    jwks: JwksSource
    tenant_claim: str = "tenant"
    admin_scope: str = "catalog:admin"
    leeway_seconds: int = 30

    async def claims(self, token: str) -> dict[str, Any]:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("the token is not a well-formed JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise Unauthenticated("the token's signing algorithm is not accepted")
        try:
            key = await self.jwks.key(header.get("kid"))
        except (OSError, ValueError, jwt.PyJWTError) as exc:
            raise Unauthenticated(
                f"the issuer's signing keys are unavailable ({type(exc).__name__})"
            ) from None
        if key is None:
            raise Unauthenticated("the token is signed by an unknown key")
        if not self.jwks.fits(key, header["alg"]):
            raise Unauthenticated("the token's signing algorithm does not fit the key it names")
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[header["alg"]],
                issuer=self.issuer,
                leeway=self.leeway_seconds,
                # The audience is compared below, as URIs (scheme and host in any case, AUTH-13).
                options={"require": ["exp", "iss", "aud", "sub"], "verify_aud": False},
            )
        except jwt.MissingRequiredClaimError as exc:
            if exc.claim == "sub":
                raise Unauthenticated(
                    "the token names no subject (sub): catalog tells callers apart by it"
                ) from None
            raise Unauthenticated(f"the token is invalid ({type(exc).__name__})") from None
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("the token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("the token was issued for another resource") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("the token comes from another issuer") from None
        except (jwt.PyJWTError, TypeError, ValueError) as exc:
            # TypeError/ValueError: key material PyJWT cannot use with this algorithm (a case
            # ``JwksSource.fits`` does not foresee) is still the token's fault, never a server error.
            raise Unauthenticated(f"the token is invalid ({type(exc).__name__})") from None
        if not isinstance(claims.get("sub"), str) or not claims["sub"].strip():
            raise Unauthenticated("the token names no subject (sub): catalog tells callers apart by it")
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        wanted = canonical_url(self.audience)
        if not any(isinstance(aud, str) and canonical_url(aud) == wanted for aud in audiences):
            raise Unauthenticated("the token was issued for another resource")
        return claims

    @staticmethod
    def scopes_of(claims: dict[str, Any]) -> frozenset[str]:
        scope = claims.get("scope")
        if isinstance(scope, str):
            return frozenset(part for part in scope.split() if part)
        scp = claims.get("scp")
        if isinstance(scp, list):
            return frozenset(part for part in scp if isinstance(part, str) and part)
        return frozenset()

    def principal(self, claims: dict[str, Any], tenant_id: int, tenant_slug: str) -> Principal:
        scopes = self.scopes_of(claims)
        return Principal(
            kind="jwt",
            tenant_id=tenant_id,
            tenant_slug=tenant_slug,
            scopes=scopes - {self.admin_scope},
            is_admin=self.admin_scope in scopes,
            subject=claims["sub"],
            expires_at=datetime.fromtimestamp(claims["exp"] + self.leeway_seconds, UTC),
        )


def jwt_verifier(catalog: Catalog) -> JwtVerifier | None:
    """The catalogue's verifier of OAuth access tokens (None with OAuth off), built once: it keeps
    the issuer's signing keys between requests."""
    settings = catalog.settings
    if not settings.oauth_enabled:
        return None
    if catalog.jwt_verifier is None:
        assert settings.oauth_issuer and settings.oauth_audience and settings.oauth_jwks
        catalog.jwt_verifier = JwtVerifier(
            issuer=settings.oauth_issuer,
            audience=settings.oauth_audience,
            jwks=JwksSource(settings.oauth_jwks),
            tenant_claim=settings.oauth_tenant_claim,
            admin_scope=settings.oauth_admin_scope,
            leeway_seconds=settings.oauth_leeway_seconds,
        )
    return catalog.jwt_verifier
