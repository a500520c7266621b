"""OAuth 2.1 resource server: JWT access tokens from a configured issuer, mapped to a principal.

A token is accepted only if it is signed by a key of the configured JWKS (a file, or an https URL),
with an asymmetric algorithm, names the configured issuer and audience (the canonical ``/mcp``
URL: RFC 8707), and is within its ``exp``/``nbf`` window. The tenant comes from a claim (default
``tenant``, a tenant slug); scopes from ``scope`` (space-separated) or ``scp`` (a list). The scope
``catalog:admin`` (configurable) makes the principal an admin of its tenant.

A JWKS URL is fetched off the request path: one fetch at a time, in a background task; a request
waits for it only when no key set is known yet (or its ``kid`` is unknown and a refetch is due),
and then at most ``CATALOG_OAUTH_JWKS_WAIT_SECONDS``: past that, or when the fetch failed, the
answer is 503 naming the key set (:class:`KeySetUnavailable`), never a database error. A failed
refresh keeps the last good key set.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.auth.challenges import MCP_RESOURCE, accepted_audiences, canonical_url
from catalog.core.catalog import Catalog
from catalog.core.errors import Unauthenticated, Unavailable
from catalog.core.principal import Principal

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
_FETCH_TIMEOUT_SECONDS = 5.0
MAX_JWKS_BYTES = 1024 * 1024  # a key set is a few KiB; a larger answer is not one
MAX_CLAIM_CHARS = 1024  # sub and the tenant claim: identifiers, logged and stored

logger = logging.getLogger("catalog.auth")


class KeySetUnavailable(Unavailable):
    """No key set of the issuer is known (not fetched yet, or every fetch failed): the server's
    trouble, not the token's, so 503 and a retry rather than 401."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(
            f"the issuer's signing keys (CATALOG_OAUTH_JWKS {location[:200]!r}) are not available: {reason};"
            " retry later"
        )


class JwksError(ValueError):
    """A JWKS answer or file that is not a usable key set."""


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and not token.startswith("cat_")


@dataclass
class JwksSource:
    """Signing keys from a file (re-read when it changes) or a URL (fetched in the background,
    refetched when stale or on a new kid); the last good key set is kept whenever a refresh fails."""

    location: str
    wait_seconds: float = 2.0  # the longest a request waits for a fetch
    ttl_seconds: float = _JWKS_TTL_SECONDS
    min_refetch_seconds: float = _MIN_REFETCH_SECONDS
    _keys: dict[str, PyJWK] = field(default_factory=dict)
    _declared_algs: dict[Any, Any] = field(default_factory=dict)
    _loaded_at: float = 0.0
    _attempted_at: float = -math.inf
    _last_error: str = "not fetched yet"
    _fetching: asyncio.Task[None] | None = None
    _mtime: float | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def is_url(self) -> bool:
        return self.location.startswith(("https://", "http://"))

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key ``kid`` names (the only key, without a kid); None if the key set has none.
        Raises :class:`KeySetUnavailable` when no key set is known."""
        if not self.is_url:
            await self._refresh_file(force=False)
        elif not self._keys:
            await self._fetched()
        elif time.monotonic() - self._loaded_at > self.ttl_seconds:
            self._start_fetch()  # in the background: this request uses the keys known now
        found = self._find(kid)
        if found is None and time.monotonic() - self._attempted_at > self.min_refetch_seconds:
            # The issuer may have rotated its keys.
            if self.is_url:
                await self._fetched()
            else:
                await self._refresh_file(force=True)
            found = self._find(kid)
        if not self._keys:
            raise KeySetUnavailable(self.location, self._last_error)
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

    def _start_fetch(self) -> asyncio.Task[None]:
        """The fetch under way, or a new one: never more than one at a time."""
        if self._fetching is None or self._fetching.done():
            self._attempted_at = time.monotonic()
            self._fetching = asyncio.get_running_loop().create_task(self._fetch_and_install())
        return self._fetching

    async def _fetched(self) -> None:
        """Wait for a fetch, at most ``wait_seconds`` (the fetch goes on: a later request uses it)."""
        task = self._start_fetch()
        try:
            await asyncio.wait_for(asyncio.shield(task), self.wait_seconds)
        except TimeoutError:
            if not self._keys:
                raise KeySetUnavailable(self.location, f"no answer within {self.wait_seconds:g} s") from None

    async def _fetch_and_install(self) -> None:
        try:
            self._install(await self._fetch())
        except Exception as exc:  # whatever went wrong, the last good key set stays in use
            self._last_error = (
                str(exc) if isinstance(exc, JwksError) else f"fetch failed ({type(exc).__name__})"
            )
            logger.warning("jwks: %s: %s", self.location[:200], self._last_error)

    async def _fetch(self) -> dict[str, Any]:
        import httpx

        async with (
            httpx.AsyncClient(timeout=_FETCH_TIMEOUT_SECONDS, follow_redirects=False) as client,
            client.stream("GET", self.location) as response,
        ):
            if response.status_code != 200:
                raise JwksError(
                    f"the JWKS URL answered HTTP {response.status_code} (redirects are not followed)"
                )
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise JwksError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        try:
            return json.loads(body)
        except ValueError:
            raise JwksError("the JWKS URL did not answer JSON") from None

    def _install(self, document: Any) -> None:
        """Make ``document`` the key set, if it is one (else :class:`JwksError`, nothing changed)."""
        from jwt import PyJWKSet, PyJWTError

        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise JwksError("the JWKS is not a JWK set (an object with a 'keys' array)")
        try:
            keys = PyJWKSet.from_dict(document).keys
        except (PyJWTError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise JwksError(f"the JWKS has no usable key ({type(exc).__name__})") from None
        self._keys = {key.key_id or f"#{index}": key for index, key in enumerate(keys)}
        # The ``alg`` each key names, if any (PyJWK fills in a default when it names none).
        self._declared_algs = {
            raw.get("kid"): raw.get("alg") for raw in document["keys"] if isinstance(raw, dict)
        }
        self._loaded_at = time.monotonic()

    async def _refresh_file(self, *, force: bool) -> None:
        async with self._lock:
            # A file is looked at again at most every few seconds, off the event loop.
            if self._keys and not force and time.monotonic() - self._loaded_at < _FILE_RECHECK_SECONDS:
                return
            self._attempted_at = time.monotonic()
            try:
                mtime, document = await asyncio.to_thread(self._read_file)
                if document is not None:
                    self._install(document)
                    self._mtime = mtime
            except (OSError, ValueError) as exc:  # the last good key set stays in use
                self._last_error = (
                    str(exc) if isinstance(exc, JwksError) else f"unreadable ({type(exc).__name__})"
                )
                logger.warning("jwks: %s: %s", self.location[:200], self._last_error)
            self._loaded_at = time.monotonic()

    def _read_file(self) -> tuple[float, Any]:
        path = Path(self.location)
        mtime = path.stat().st_mtime
        if self._keys and mtime == self._mtime:
            return mtime, None
        return mtime, json.loads(path.read_text())


@dataclass
class JwtVerifier:
    issuer: str
    audience: str
    jwks: JwksSource
    tenant_claim: str = "tenant"
    admin_scope: str = "catalog:admin"
    leeway_seconds: int = 30

    async def claims(self, token: str, resource: str = MCP_RESOURCE) -> dict[str, Any]:
        """The claims of ``token`` if it is a valid access token for ``resource`` (``/mcp`` or
        ``/admin/v1``, see ``challenges.accepted_audiences``); else :class:`Unauthenticated`."""
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("the token is not a well-formed JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise Unauthenticated("the token's signing algorithm is not accepted")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise Unauthenticated("the token's key id (kid) is not a string")
        key = await self.jwks.key(kid)  # KeySetUnavailable (503) when no key set is known
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
        self._check_text_claims(claims)
        self.expires_at(claims)  # a number of seconds a datetime can hold, else refused here
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        wanted = accepted_audiences(self.audience, resource)
        if not any(isinstance(aud, str) and canonical_url(aud) in wanted for aud in audiences):
            raise Unauthenticated("the token was issued for another resource")
        return claims

    def _check_text_claims(self, claims: dict[str, Any]) -> None:
        """The claims catalog logs, stores and compares in SQL are printable text of a sane length:
        a NUL, a lone surrogate or a line break in them is the token's fault (401), not a 500 or a
        forged log line."""
        named = {"sub": claims["sub"]}
        tenant = claims.get(self.tenant_claim)
        if isinstance(tenant, str):
            named[self.tenant_claim] = tenant
        for name, value in named.items():
            if len(value) > MAX_CLAIM_CHARS or not value.isprintable():
                raise Unauthenticated(
                    f"the token's {name!r} claim must be printable text of at most {MAX_CLAIM_CHARS} characters"
                )
        scope, scp = claims.get("scope"), claims.get("scp")
        parts = scope.split() if isinstance(scope, str) else scp if isinstance(scp, list) else []
        if not all(part.isprintable() for part in parts if isinstance(part, str)):
            raise Unauthenticated("the token's scopes must be printable text")

    def expires_at(self, claims: dict[str, Any]) -> datetime:
        """When a principal of these claims stops being valid: ``exp`` plus the leeway."""
        exp = claims["exp"]
        if isinstance(exp, bool) or not isinstance(exp, int | float):
            raise Unauthenticated("the token's expiry (exp) is not a number")
        try:
            return datetime.fromtimestamp(exp + self.leeway_seconds, UTC)
        except (OverflowError, OSError, ValueError):
            raise Unauthenticated("the token's expiry (exp) is out of range") from None

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
            expires_at=self.expires_at(claims),
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
            jwks=JwksSource(settings.oauth_jwks, wait_seconds=settings.oauth_jwks_wait_seconds),
            tenant_claim=settings.oauth_tenant_claim,
            admin_scope=settings.oauth_admin_scope,
            leeway_seconds=settings.oauth_leeway_seconds,
        )
    return catalog.jwt_verifier
