"""How a read replica is judged, without a database: WAL positions, lag, and the position a
tenant's reads must not be older than (``catalog.core.replicas``; on real replication:
``tests/e2e/test_read_replicas.py``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from catalog.core.replicas import ReadReplicas, parse_lsn
from catalog.db.engine import create_engine


@pytest.fixture
async def replicas() -> AsyncIterator[ReadReplicas]:
    engine = create_engine("postgresql://nobody@127.0.0.1:1/none", pool_size=1)  # never connected
    try:
        yield ReadReplicas(engine, [], max_lag_ms=1000)
    finally:
        await engine.dispose()


def test_a_wal_position_is_ordered_as_postgresql_orders_it() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn("0/0") == 0
    assert parse_lsn("1/0") > parse_lsn("0/FFFFFFFF")  # type: ignore[operator]
    assert parse_lsn(None) is None


def test_lag_is_the_age_of_the_oldest_primary_position_not_replayed(replicas: ReadReplicas) -> None:
    now = time.monotonic()
    replicas._samples.extend([(now - 3.0, 100), (now - 1.0, 200), (now, 300)])
    assert replicas._lag_ms(300) == 0.0
    assert replicas._lag_ms(250) < 500  # only 300, sampled just now, is not replayed
    assert 1000 <= replicas._lag_ms(150) < 2000  # 200, sampled a second ago, is not replayed
    assert 3000 <= replicas._lag_ms(50) < 4000
    assert replicas._lag_ms(None) == float("inf")  # not a standby: never compared


def test_a_notified_tenant_reads_on_the_primary_until_its_position_is_known(replicas: ReadReplicas) -> None:
    assert replicas.required(1) == 0
    replicas._pending.add(1)
    assert replicas.required(1) is None  # its change's position is not known yet
    assert replicas.required(2) == 0  # other tenants are not held back
    replicas._pending.clear()
    replicas._notified[1] = 500
    assert replicas.required(1) == 500
    replicas._floor = 700  # a gap: every tenant's reads wait for this position
    assert (replicas.required(1), replicas.required(2), replicas.required(None)) == (700, 700, 700)
    replicas._stamping_all = True
    assert replicas.required(2) is None
