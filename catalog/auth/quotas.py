"""Fair use: request rates per caller, and open streams per credential, tenant and process.

Both are per process. ``catalog serve --workers N`` gives each worker 1/N of a caller's request
rate (connections are spread over the workers by the kernel, so a caller's requests are too): the
host as a whole allows about the configured rate. Several hosts each allow it (a load balancer's
limits are the place for a fleet-wide one). Streams are counted where they are held.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from catalog.core.principal import Principal

MAX_TRACKED_CALLERS = 100_000  # buckets kept; the least recently seen is forgotten beyond that


class RateLimiter:
    """A token bucket per caller: ``per_minute`` sustained, ``burst`` at once (this process's share)."""

    def __init__(self, per_minute: float, burst: float, *, share: int = 1) -> None:
        self.enabled = per_minute > 0
        self.rate = per_minute / 60 / max(share, 1)  # tokens per second
        self.burst = max(burst / max(share, 1), 1.0)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str, now: float | None = None) -> float:
        """Spend one request of ``key``'s budget: 0 if allowed, else the seconds until it would be."""
        return self._spend(key, 1.0, now)

    def wait(self, key: str, now: float | None = None) -> float:
        """The seconds until ``key`` could spend a request (0: now), spending nothing."""
        return self._spend(key, 0.0, now)

    def _spend(self, key: str, cost: float, now: float | None) -> float:
        if not self.enabled:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens, at = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - cost, now)
            retry = 0.0
        else:
            self._buckets[key] = (tokens, now)
            retry = (1 - tokens) / self.rate
        while len(self._buckets) > MAX_TRACKED_CALLERS:
            self._buckets.popitem(last=False)
        return retry


class KnownCredentials:
    """Credentials (by the edge's hashed key) that have authenticated in this process, most recently
    seen last: a request carrying one is never held back by its address's failed authentications
    (callers behind one proxy share an address). Bounded like the rate buckets."""

    def __init__(self) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def add(self, key: str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > MAX_TRACKED_CALLERS:
            self._keys.popitem(last=False)

    def discard(self, key: str) -> None:
        self._keys.pop(key, None)


CALLER_SCOPE_KEY = "catalog.caller"


@dataclass(slots=True)
class Caller:
    """Whose budgets a request spends, left in its ASGI scope by the edge so that authentication,
    wherever it runs, reports its outcome here (:func:`authentication_failed`,
    :func:`authentication_succeeded`)."""

    limiter: RateLimiter
    known: KnownCredentials
    address: str
    credential: str | None  # the edge's hashed key of the Authorization header, if one was sent

    @property
    def address_key(self) -> str:
        return "address:" + self.address

    @property
    def failures_key(self) -> str:
        return "failed-authentication:" + self.address

    def admit(self, now: float | None = None) -> float:
        """Spend this request's budget: 0 if admitted, else the seconds until it would be.

        A credential spends its own bucket (callers behind one proxy share an address); one not
        known to have authenticated must also find its address's failed-authentication budget not
        spent, so rotating random credentials costs no database lookup once that is gone."""
        if self.credential is None:
            return self.limiter.take(self.address_key, now)
        wait = self.limiter.take(self.credential, now)
        if wait or self.credential in self.known:
            return wait
        return self.limiter.wait(self.failures_key, now)


def authentication_failed(scope: MutableMapping[str, Any]) -> None:
    """Charge a failed authentication to the caller's address (the one rule, both surfaces): each
    one spends a request of the address's failed-authentication budget, and its credential is no
    longer known good."""
    caller = scope.get(CALLER_SCOPE_KEY)
    if isinstance(caller, Caller):
        caller.limiter.take(caller.failures_key)
        if caller.credential is not None:
            caller.known.discard(caller.credential)


def authentication_succeeded(scope: MutableMapping[str, Any]) -> None:
    """The request's credential authenticated: its address's failures no longer hold it back."""
    caller = scope.get(CALLER_SCOPE_KEY)
    if isinstance(caller, Caller) and caller.credential is not None:
        caller.known.add(caller.credential)


@dataclass(frozen=True)
class StreamLimits:
    per_credential: int
    per_tenant: int
    anonymous: int  # all anonymous callers together
    per_process: int


class StreamQuotas:
    """Open streams (listen, 2025 GET) of this process, by credential, tenant and in all."""

    def __init__(self, limits: StreamLimits) -> None:
        self.limits = limits
        self._credentials: dict[str, int] = {}
        self._tenants: dict[int, int] = {}
        self._anonymous = 0
        self.open = 0

    def refusal(self, principal: Principal) -> str | None:
        """Why another stream of ``principal`` may not open now, or None if it may."""
        limits = self.limits
        if self.open >= limits.per_process:
            return "this server holds as many streams as it may; try another or retry later"
        if principal.tenant_id is not None and self._tenants.get(principal.tenant_id, 0) >= limits.per_tenant:
            return f"the tenant has {limits.per_tenant} streams open here, its limit"
        if principal.kind == "anonymous":
            if self._anonymous >= limits.anonymous:
                return f"anonymous callers have {limits.anonymous} streams open here, their limit"
        elif self._credentials.get(principal.identity, 0) >= limits.per_credential:
            return f"this credential has {limits.per_credential} streams open here, its limit"
        return None

    @contextlib.contextmanager
    def slot(self, principal: Principal) -> Iterator[str | None]:
        """Hold a stream slot for the duration: yields None, or why none was given."""
        refused = self.refusal(principal)
        if refused is not None:
            yield refused
            return
        key, tenant, anonymous = principal.identity, principal.tenant_id, principal.kind == "anonymous"
        self.open += 1
        self._credentials[key] = self._credentials.get(key, 0) + 1
        if tenant is not None:
            self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
        self._anonymous += anonymous
        try:
            yield None
        finally:
            self.open -= 1
            self._anonymous -= anonymous
            _decrement(self._credentials, key)
            if tenant is not None:
                _decrement(self._tenants, tenant)


def _decrement(counts: dict, key: object) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
