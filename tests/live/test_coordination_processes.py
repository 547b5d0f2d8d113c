"""Three kvcap replicas — three processes, each with its own ``PostgresCoordinator`` on the same PostgreSQL
database — share a registry of 1,000 deployments: no deployment owned twice, none left out, an even split
(``assign`` bounds every share to ``ceil(1000 / 3)`` = 334, so the tolerance is one key: 333 or 334 each),
and when one replica leaves — cleanly or killed — the other two pick up its share, again evenly (500 each).

Each process is driven tick by tick (``tests/live/coordination_replica.py``): a round asks every replica for
one ``owned`` call, as one tick of the live loop. Ownership changes only inside a replica's own call, so the
sets reported in one round are held at the same moment, and must be disjoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from service.db.session import create_engine
from service.live.coordination import assign
from tests.live.coordination_replica import fleet_keys

ROOT = Path(__file__).resolve().parents[2]
COUNT = 1000
KEYS = set(fleet_keys(COUNT))
ROUNDS = 100  # a bound only: a healthy handover settles in one or two rounds


class Replica:
    """One replica process, spoken to over its stdin/stdout."""

    def __init__(self, process: asyncio.subprocess.Process, replica_id: str) -> None:
        self.process = process
        self.replica_id = replica_id

    @classmethod
    async def start(cls, database_url: str, group: str, replica_id: str) -> Replica:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.live.coordination_replica",
            database_url,
            group,
            replica_id,
            str(COUNT),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        replica = cls(process, replica_id)
        assert (await replica.read())["ready"] == replica_id
        return replica

    async def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout=60)
        assert line, f"replica {self.replica_id} exited (code {self.process.returncode})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        return await self.read()

    async def tick(self) -> set[str]:
        answer = await self.ask("tick")
        assert answer["reachable"] is True
        return set(answer["owned"])

    async def close(self) -> None:
        if self.process.returncode is None:
            assert (await self.ask("close"))["closed"] is True
            await asyncio.wait_for(self.process.wait(), timeout=30)

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)


@pytest.fixture
def group() -> str:
    """A group per test, so coordinators of other tests (or a running kvcap) sharing the database don't count."""
    return f"kvcap-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def replicas(database_url: str, group: str) -> AsyncIterator[list[Replica]]:
    if not database_url.startswith("postgresql"):
        pytest.skip("needs PostgreSQL: set KVCAP_TEST_DATABASE_URL")
    started = await asyncio.gather(
        *(Replica.start(database_url, group, f"kvcap-{uuid.uuid4().hex[:10]}") for _ in range(3))
    )
    try:
        yield list(started)
    finally:
        for replica in started:
            replica.kill()
            await replica.process.wait()


async def settled_round(replicas: list[Replica]) -> dict[str, set[str]]:
    """Rounds of one tick each until every deployment is owned; every round must be free of overlap."""
    owned: dict[str, set[str]] = {}
    for _ in range(ROUNDS):
        owned = {r.replica_id: await r.tick() for r in replicas}
        seen: set[str] = set()
        for replica_id, keys in owned.items():
            assert not keys & seen, f"owned twice: {sorted(keys & seen)[:5]} ({replica_id})"
            seen |= keys
        assert seen <= KEYS
        if seen == KEYS:
            return owned
        await asyncio.sleep(0.05)  # a departed session leaves pg_stat_activity asynchronously
    pytest.fail(f"after {ROUNDS} rounds {len(KEYS) - len(seen)} deployments were still unowned")


def assert_even(owned: dict[str, set[str]]) -> None:
    shares = sorted(len(keys) for keys in owned.values())
    assert shares[-1] - shares[0] <= 1, shares  # the stated tolerance: one deployment
    assert sum(shares) == COUNT


async def locks_held(database_url: str, group: str) -> dict[str, int]:
    """Advisory locks per replica session, read by an independent session (the server's view, not the replicas')."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT a.application_name, count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database() "
                    "AND starts_with(a.application_name, :prefix) GROUP BY a.application_name"
                ),
                {"prefix": group + ":"},
            )
            return {str(name): int(n) for name, n in rows}
    finally:
        await engine.dispose()


async def test_three_processes_share_1000_deployments_evenly_and_disjointly(
    replicas: list[Replica], database_url: str, group: str
) -> None:
    members = {r.replica_id for r in replicas}
    assert set((await replicas[0].ask("members"))["members"]) == members
    owned = await settled_round(replicas)
    assert_even(owned)
    # Each replica owns exactly what the shared rule gives it, and the server holds one lock per deployment.
    expected = assign(sorted(KEYS), members)
    for replica_id, keys in owned.items():
        assert keys == {k for k, m in expected.items() if m == replica_id}
    assert await locks_held(database_url, group) == {
        f"{group}:{replica_id}": len(keys) for replica_id, keys in owned.items()
    }
    # Stable: another round changes nothing.
    assert {r.replica_id: await r.tick() for r in replicas} == owned


@pytest.mark.parametrize("how", ["closes", "is killed"])
async def test_when_one_replica_leaves_the_other_two_take_its_share(
    replicas: list[Replica], database_url: str, group: str, how: str
) -> None:
    before = await settled_round(replicas)
    assert_even(before)
    leaving, survivors = replicas[0], replicas[1:]
    if how == "closes":
        await leaving.close()
    else:
        leaving.kill()
        await leaving.process.wait()
    after = await settled_round(survivors)
    assert_even(after)  # 500 each
    taken = before[leaving.replica_id]
    for replica in survivors:
        kept = before[replica.replica_id] & after[replica.replica_id]
        # Most of what a survivor had stays with it: only the bound displaces a few keys between survivors.
        assert len(kept) >= len(before[replica.replica_id]) - 0.03 * COUNT
    assert taken <= after[survivors[0].replica_id] | after[survivors[1].replica_id]
    assert await locks_held(database_url, group) == {
        f"{group}:{r.replica_id}": len(after[r.replica_id]) for r in survivors
    }
