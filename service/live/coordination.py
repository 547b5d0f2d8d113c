"""Sharing the scrape work between kvcap replicas, so each deployment is read — and exported — by one only.

Several kvcap replicas behind one Service are scraped by Prometheus independently. If every replica read
every deployment, the fleet would be scraped N times and every ``kvcap_observed_*`` series exported N times
(with different ``instance`` labels, so sums on dashboards double). Instead each deployment has one owner.

The model (PostgreSQL; no table, no migration):

1. **Membership.** Each replica keeps one dedicated, long-lived connection whose ``application_name`` is
   ``kvcap-replica:<replica id>``. The live members are the distinct such names in ``pg_stat_activity`` for
   the current database. A replica joins by connecting and leaves by disconnecting — or by dying: the server
   ends the session when the TCP connection goes, with no heartbeat table to clean up.
2. **Preference.** Each deployment key (``namespace/name``) is assigned by rendezvous (highest-random-weight)
   hashing with bounded loads (``assign``): keys are visited in the order of their hash, and each goes to the
   member with the highest ``hash(member, key)`` that still has room (every member gets ``floor(keys /
   members)`` keys, the first ones to fill up one more). Every replica computes the same answer from the
   same member list and registry, and the split is even to one key. Plain rendezvous hashing leaves the
   split to chance: 1,000 keys over 3 replicas came out up to 13 % off the even share in 40 random sets of
   pod names, and far more for small registries. When a member joins or leaves, its share moves plus a few
   keys the bound displaces (about 5 of 1,000 on average, 21 at most, over the 120 departures of those
   trials): the bounded-load variant of consistent hashing (Mirrokni, Thorup and Zadimoghaddam, "Consistent
   Hashing with Bounded Loads", 2016). Replicas whose registry copies differ for a moment (a write not yet
   reloaded elsewhere) may disagree on a few keys; exclusion (below) keeps that safe, and the next reload
   ends it.
3. **Exclusion.** Preference alone can disagree while replicas see different member lists (one has noticed a
   newcomer, the other not yet). Ownership is therefore a session-level advisory lock,
   ``pg_try_advisory_lock(<64-bit hash of the key>)``, taken on the dedicated connection: a replica scrapes
   only the keys whose lock it holds, so two replicas never own the same deployment, even mid-change. Each
   tick a replica releases the locks of keys it is no longer preferred for, and tries to take those it is
   preferred for. A handover therefore leaves a key unowned for at most one interval, never owned twice.
4. **Failure.** Locks live as long as the session: a replica that dies or loses its connection loses its
   locks, and the others take its keys on their next tick (after the server notices the dead connection —
   immediately on a clean exit, after TCP keepalive on a network partition; lower ``tcp_keepalives_idle`` on
   the server to shorten that). A replica whose connection was dropped while the database is up reconnects
   at once (``owned`` retries once on a fresh connection) and owns what it can lock again. A replica that
   cannot reach the database at all reports ``reachable = False``; the live loop then keeps exporting the
   deployments it last owned (``service.exporter.pipeline``) instead of dropping every series: no other
   replica can take their locks while the database is down either, so nothing is exported twice unless the
   database is reachable from the others but not from this one (a partition), and then only until this
   replica notices it is back.

Requirements: a direct or session-pooled connection (PgBouncer in transaction mode breaks session locks and
``application_name``), and the same database for all replicas. Advisory locks are per database, so kvcap
installations in different databases of one server do not interfere. With SQLite (one replica by
construction) use ``SingleCoordinator``.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import logging
from collections.abc import Collection, Iterable, Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

logger = logging.getLogger("kvcap.live.coordination")

DEFAULT_GROUP = "kvcap-replica"
# PostgreSQL truncates application_name to NAMEDATALEN - 1 = 63 bytes; keep "<group>:<replica id>" inside that.
_MAX_APPLICATION_NAME_BYTES = 63


class Coordinator(abc.ABC):
    """Decides which deployment keys this kvcap replica reads."""

    #: False while the last ``owned`` call could not reach the coordination store (its answer is then empty
    #: and means "unknown", not "nothing").
    reachable: bool = True

    @abc.abstractmethod
    async def owned(self, keys: Sequence[str]) -> set[str]:
        """The subset of ``keys`` this replica should read now."""

    async def close(self) -> None:  # noqa: B027 — optional hook, nothing to release by default
        """Give up everything this replica owns (on shutdown)."""


class SingleCoordinator(Coordinator):
    """One replica owns everything (SQLite, or a single kvcap)."""

    async def owned(self, keys: Sequence[str]) -> set[str]:
        return set(keys)


def _digest(text_value: str) -> bytes:
    return hashlib.blake2b(text_value.encode(), digest_size=8).digest()


def lock_id(key: str, group: str = DEFAULT_GROUP) -> int:
    """The signed 64-bit advisory-lock key of a deployment key (namespaced so other apps' locks don't clash)."""
    return int.from_bytes(_digest(group + "\0" + key), "big", signed=True)


def preferred_owner(key: str, members: Sequence[str] | set[str]) -> str:
    """Rendezvous hashing: the member with the highest weight for ``key`` (ties broken by name)."""
    return max(members, key=lambda member: (_digest(member + "\0" + key), member))


def assign(keys: Iterable[str], members: Collection[str]) -> dict[str, str]:
    """The owner of every key: rendezvous hashing with bounded loads (module docstring, point 2).

    Keys are visited in the order of their digest (not their names, which cluster by namespace), so the keys
    the bound displaces are spread over the registry; the result does not depend on the order ``keys`` come in.
    """
    ranked = sorted(set(members))
    if not ranked:
        raise ValueError("assign needs at least one member")
    unique = sorted(set(keys), key=lambda key: (_digest(key), key))
    # Every member takes ``base`` keys; ``extra`` of them (the first to fill up) one more: shares differ by ≤ 1.
    base, extra = divmod(len(unique), len(ranked))
    load = dict.fromkeys(ranked, 0)
    owners: dict[str, str] = {}
    for key in unique:
        for member in sorted(ranked, key=lambda m: (_digest(m + "\0" + key), m), reverse=True):
            if load[member] < base or (load[member] == base and extra > 0):
                if load[member] == base:
                    extra -= 1
                owners[key] = member
                load[member] += 1
                break
    return owners


def normalize_replica_id(replica_id: str, group: str = DEFAULT_GROUP) -> str:
    """A replica id that fits ``application_name`` untruncated (long ids keep a hash of the full id)."""
    replica_id = "".join(ch if ch.isprintable() and ch.isascii() else "_" for ch in replica_id.strip())
    if not replica_id:
        raise ValueError("replica_id must not be empty")
    room = _MAX_APPLICATION_NAME_BYTES - len(group) - 1
    if room < 24:
        raise ValueError(f"group {group!r} is too long for application_name")
    if len(replica_id) > room:
        replica_id = replica_id[: room - 17] + "~" + _digest(replica_id).hex()
    return replica_id


class PostgresCoordinator(Coordinator):
    """Membership through ``pg_stat_activity``, preference by rendezvous hashing, exclusion by session-level
    advisory locks (see the module docstring).

    ``interval_s`` is the caller's tick; every database round trip of one ``owned`` call is bounded by it (at
    most 10 s), so a hung database delays a refresh by one tick at worst. ``group`` separates sets of replicas
    that share a database but not their work (tests; two installations in one database).
    """

    def __init__(
        self, engine: AsyncEngine, replica_id: str, interval_s: float, *, group: str = DEFAULT_GROUP
    ) -> None:
        if not group or ":" in group or not group.isascii():
            raise ValueError("group must be a non-empty ASCII name without ':'")
        self.group = group
        self.replica_id = normalize_replica_id(replica_id, group)
        self.application_name = f"{group}:{self.replica_id}"
        self._timeout_s = max(1.0, min(interval_s, 10.0))
        # A separate engine without a pool: the one connection must really close when we drop it (a pooled
        # connection would keep its locks and application_name alive in the pool).
        self._engine = create_async_engine(
            engine.url,
            poolclass=NullPool,
            connect_args={
                "application_name": self.application_name,
                "connect_timeout": max(1, int(self._timeout_s)),
                "options": f"-c statement_timeout={int(self._timeout_s * 1000)}",
            },
        )
        self._conn: AsyncConnection | None = None
        self._held: dict[str, int] = {}
        self._mutex = asyncio.Lock()

    @property
    def held(self) -> frozenset[str]:
        """Keys whose lock this replica holds (as of its last ``owned`` call)."""
        return frozenset(self._held)

    async def connect(self) -> None:
        """Join the membership now (``owned`` also connects on demand)."""
        async with self._mutex:
            await self._connection()

    async def members(self) -> set[str]:
        """Replica ids currently connected to this database (including this one)."""
        async with self._mutex:
            return await self._members(await self._connection())

    async def owned(self, keys: Sequence[str]) -> set[str]:
        async with self._mutex:
            for attempt in (1, 2):
                try:
                    async with asyncio.timeout(self._timeout_s):
                        owned = await self._rebalance(keys)
                except asyncio.CancelledError:
                    # A lock may have been granted server-side without being recorded here: drop the session
                    # so that no lock outlives our knowledge of it.
                    await self._drop()
                    raise
                except Exception as exc:
                    await self._drop()
                    # A dropped session is retried at once on a fresh connection; a timeout is not (the
                    # database is hung, and a second wait would only delay the tick further).
                    if attempt == 1 and not isinstance(exc, TimeoutError):
                        continue
                    logger.warning(
                        "coordination database unavailable (%s); keeping the deployments this replica last owned",
                        type(exc).__name__,
                    )
                    self.reachable = False
                    return set()
                self.reachable = True
                return owned
            raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        async with self._mutex:
            if self._conn is not None and self._held:
                try:
                    async with asyncio.timeout(self._timeout_s):
                        await self._conn.execute(text("SELECT pg_advisory_unlock_all()"))
                except Exception as exc:
                    logger.info(
                        "releasing coordination locks failed (%s); closing anyway", type(exc).__name__
                    )
            await self._drop()
            await self._engine.dispose()

    async def _connection(self) -> AsyncConnection:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._held.clear()
            conn = await self._engine.connect()
            # Every statement commits on its own: no transaction stays open between ticks, and
            # pg_stat_activity is read fresh each time (it is snapshotted per transaction).
            self._conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._held.clear()
        if conn is None:
            return
        try:
            await conn.invalidate()
            await conn.close()
        except Exception as exc:  # the connection is being thrown away; nothing more to do
            logger.debug("closing the coordination connection: %s", type(exc).__name__)

    async def _members(self, conn: AsyncConnection) -> set[str]:
        rows = await conn.execute(
            text(
                "SELECT DISTINCT application_name FROM pg_stat_activity "
                "WHERE datname = current_database() AND starts_with(application_name, :prefix)"
            ),
            {"prefix": self.group + ":"},
        )
        members = {str(name)[len(self.group) + 1 :] for (name,) in rows}
        members.add(self.replica_id)
        return members

    async def _rebalance(self, keys: Sequence[str]) -> set[str]:
        conn = await self._connection()
        members = await self._members(conn)
        wanted = {key for key, owner in assign(keys, members).items() if owner == self.replica_id}
        release = [key for key in self._held if key not in wanted]
        if release:
            await conn.execute(
                text("SELECT pg_advisory_unlock(k) FROM unnest(CAST(:ids AS bigint[])) AS t(k)"),
                {"ids": [self._held[key] for key in release]},
            )
            for key in release:
                del self._held[key]
        acquire = {lock_id(key, self.group): key for key in wanted if key not in self._held}
        if acquire:
            rows = await conn.execute(
                text("SELECT k, pg_try_advisory_lock(k) FROM unnest(CAST(:ids AS bigint[])) AS t(k)"),
                {"ids": list(acquire)},
            )
            for ident, granted in rows:
                if granted:
                    self._held[acquire[int(ident)]] = int(ident)
        return {key for key in keys if key in self._held}
