"""Scale-out: two coordinators on a real PostgreSQL never own the same deployment, together own all of them,
and take over from each other when one goes away. Pure rendezvous-hashing properties need no database."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.session import create_engine
from service.live.coordination import (
    PostgresCoordinator,
    assign,
    lock_id,
    normalize_replica_id,
    preferred_owner,
)

KEYS = [f"ns-{i % 7}/deployment-{i}" for i in range(60)]


def test_rendezvous_moves_only_the_keys_of_a_member_that_leaves() -> None:
    before = {key: preferred_owner(key, {"a", "b", "c"}) for key in KEYS}
    after = {key: preferred_owner(key, {"a", "b"}) for key in KEYS}
    moved = {key for key in KEYS if before[key] != after[key]}
    assert moved == {key for key in KEYS if before[key] == "c"}
    assert {"a", "b", "c"} == set(before.values())


def test_bounded_loads_split_evenly_to_one_key_whatever_the_names() -> None:
    keys = [f"team-{i % 20}/deployment-{i}" for i in range(1000)]
    for trial in range(10):
        members = {f"kvcap-{uuid.UUID(int=trial * 7919 + j).hex[:12]}" for j in range(3)}
        loads = Counter(assign(keys, members).values())
        assert set(loads) == members
        assert max(loads.values()) - min(loads.values()) <= 1, loads
    # Small registries too (plain rendezvous hashing may give one replica all 7 here).
    for count in (1, 2, 7, 60):
        loads = Counter(assign(KEYS[:count], {"a", "b", "c"}).values())
        assert max(loads.values()) <= -(-count // 3)
        assert sum(loads.values()) == count


def test_bounded_loads_keep_the_preferred_owner_when_it_has_room() -> None:
    owners = assign(KEYS, {"a", "b", "c"})
    kept = sum(1 for key in KEYS if owners[key] == preferred_owner(key, {"a", "b", "c"}))
    assert kept >= 0.8 * len(KEYS)
    # Alone, a member owns everything; the input order does not matter.
    assert set(assign(KEYS, {"a"}).values()) == {"a"}
    assert assign(list(reversed(KEYS)), ["c", "b", "a"]) == owners


def test_a_member_leaving_moves_its_share_and_few_others() -> None:
    keys = [f"team-{i % 20}/deployment-{i}" for i in range(1000)]
    members = {"kvcap-7d9f8-x2k4p", "kvcap-7d9f8-q8r2m", "kvcap-7d9f8-zz01a"}
    before = assign(keys, members)
    for leaving in sorted(members):
        after = assign(keys, members - {leaving})
        moved = {key for key in keys if before[key] != after[key]}
        share = {key for key in keys if before[key] == leaving}
        assert share <= moved
        assert len(moved - share) <= 0.03 * len(keys)  # displaced by the bound: a few, not a reshuffle


def test_lock_ids_are_signed_64_bit_and_separate_groups() -> None:
    ids = {lock_id(key) for key in KEYS}
    assert len(ids) == len(KEYS)
    assert all(-(2**63) <= i < 2**63 for i in ids)
    assert lock_id("llm/chat", "kvcap-replica") != lock_id("llm/chat", "other")


def test_long_replica_ids_are_shortened_to_fit_application_name_and_stay_distinct() -> None:
    long_a = "kvcap-" + "a" * 80 + "-1"
    long_b = "kvcap-" + "a" * 80 + "-2"
    assert len("kvcap-replica:" + normalize_replica_id(long_a)) <= 63
    assert normalize_replica_id(long_a) != normalize_replica_id(long_b)
    assert normalize_replica_id("kvcap-7d9f8-x2k4p") == "kvcap-7d9f8-x2k4p"


@pytest.fixture
async def pg_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    if not database_url.startswith("postgresql"):
        pytest.skip("needs PostgreSQL: set KVCAP_TEST_DATABASE_URL")
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def group() -> str:
    """A group per test, so coordinators of other tests (or a running kvcap) sharing the database don't count."""
    return f"kvcap-test-{uuid.uuid4().hex[:8]}"


async def owned_once_settled(
    coordinator: PostgresCoordinator, keys: list[str], expected: set[str]
) -> set[str]:
    """``owned`` after the server has finished ending a departed replica's session.

    A closed or killed session leaves ``pg_stat_activity`` and frees its locks asynchronously, so the survivor
    may need a few ticks; the bound only keeps a broken database from hanging the suite.
    """
    owned: set[str] = set()
    for _ in range(100):
        owned = await coordinator.owned(keys)
        if owned == expected:
            break
        await asyncio.sleep(0.05)
    return owned


def assert_partition(a: set[str], b: set[str]) -> None:
    assert not a & b, f"owned twice: {sorted(a & b)[:5]}"
    assert a | b == set(KEYS)


async def test_two_replicas_split_the_deployments_without_overlap(pg_engine: AsyncEngine, group: str) -> None:
    a = PostgresCoordinator(pg_engine, "replica-a", 5.0, group=group)
    b = PostgresCoordinator(pg_engine, "replica-b", 5.0, group=group)
    try:
        await a.connect()
        await b.connect()
        assert await a.members() == {"replica-a", "replica-b"}
        owned_a = await a.owned(KEYS)
        owned_b = await b.owned(KEYS)
        assert_partition(owned_a, owned_b)
        assert owned_a and owned_b
        assert owned_a == {k for k, m in assign(KEYS, {"replica-a", "replica-b"}).items() if m == "replica-a"}
        # Stable: asking again changes nothing.
        assert await a.owned(KEYS) == owned_a
        assert await b.owned(KEYS) == owned_b
    finally:
        await a.close()
        await b.close()


async def test_a_joining_replica_never_owns_a_key_the_other_still_holds(
    pg_engine: AsyncEngine, group: str
) -> None:
    a = PostgresCoordinator(pg_engine, "replica-a", 5.0, group=group)
    b = PostgresCoordinator(pg_engine, "replica-b", 5.0, group=group)
    try:
        assert await a.owned(KEYS) == set(KEYS)  # alone: everything
        await b.connect()
        owned_b = await b.owned(KEYS)  # b is preferred for some keys, but a still holds their locks
        assert owned_b == set()
        owned_a = await a.owned(KEYS)  # a sees b and releases b's keys
        assert not owned_a & owned_b
        owned_b = await b.owned(KEYS)  # b takes them
        assert_partition(owned_a, owned_b)
    finally:
        await a.close()
        await b.close()


async def test_the_survivor_takes_over_when_a_replica_closes(pg_engine: AsyncEngine, group: str) -> None:
    a = PostgresCoordinator(pg_engine, "replica-a", 5.0, group=group)
    b = PostgresCoordinator(pg_engine, "replica-b", 5.0, group=group)
    try:
        await a.connect()
        await b.connect()
        assert_partition(await a.owned(KEYS), await b.owned(KEYS))
        await a.close()
        assert await owned_once_settled(b, KEYS, set(KEYS)) == set(KEYS)
    finally:
        await a.close()
        await b.close()


async def test_the_survivor_takes_over_when_a_replica_dies_without_closing(
    pg_engine: AsyncEngine, group: str
) -> None:
    a = PostgresCoordinator(pg_engine, "replica-a", 5.0, group=group)
    b = PostgresCoordinator(pg_engine, "replica-b", 5.0, group=group)
    try:
        await a.connect()
        await b.connect()
        assert_partition(await a.owned(KEYS), await b.owned(KEYS))
        async with pg_engine.connect() as admin:  # the server ends a's session, as when its pod is killed
            await admin.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": a.application_name},
            )
            await admin.commit()
        assert await owned_once_settled(b, KEYS, set(KEYS)) == set(KEYS)
        # The dead replica notices on its next tick, owns nothing meanwhile, then rejoins.
        assert await a.owned(KEYS) == set()
        owned_a = await a.owned(KEYS)
        assert not owned_a & b.held
    finally:
        await a.close()
        await b.close()


async def test_keys_that_disappear_are_released(pg_engine: AsyncEngine, group: str) -> None:
    a = PostgresCoordinator(pg_engine, "replica-a", 5.0, group=group)
    b = PostgresCoordinator(pg_engine, "replica-b", 5.0, group=group)
    try:
        assert await a.owned(KEYS) == set(KEYS)
        assert await a.owned(KEYS[:10]) == set(KEYS[:10])
        assert a.held == frozenset(KEYS[:10])
        # b (alone in its view once a leaves) can lock the released keys.
        await a.close()
        assert await owned_once_settled(b, KEYS[10:], set(KEYS[10:])) == set(KEYS[10:])
    finally:
        await a.close()
        await b.close()
