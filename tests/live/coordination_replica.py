"""One kvcap replica's coordinator in a process of its own, driven line by line over stdin/stdout.

    python -m tests.live.coordination_replica <database url> <group> <replica id> <number of keys>

Commands (one per line): ``tick`` → ``{"owned": [...], "reachable": bool}`` (one ``owned`` call, as one tick
of the live loop); ``members`` → ``{"members": [...]}``; ``close`` → ``{"closed": true}`` then exit (a clean
leave: locks released, session ended). Killing the process is the unclean leave.
"""

from __future__ import annotations

import asyncio
import json
import sys

from service.db.session import create_engine
from service.live.coordination import PostgresCoordinator


def fleet_keys(count: int) -> list[str]:
    """``namespace/name`` of a registry of ``count`` deployments over 20 namespaces."""
    return [f"team-{i % 20}/deployment-{i}" for i in range(count)]


async def main(url: str, group: str, replica_id: str, count: int) -> None:
    keys = fleet_keys(count)
    engine = create_engine(url)
    coordinator = PostgresCoordinator(engine, replica_id, 5.0, group=group)
    await coordinator.connect()
    loop = asyncio.get_running_loop()

    def reply(payload: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(payload) + "\n")
        sys.stdout.flush()

    reply({"ready": coordinator.replica_id})
    try:
        while True:
            command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if command == "tick":
                owned = await coordinator.owned(keys)
                reply({"owned": sorted(owned), "reachable": coordinator.reachable})
            elif command == "members":
                reply({"members": sorted(await coordinator.members())})
            elif command in ("close", ""):  # "" is end of input: the test went away
                break
            else:
                reply({"error": f"unknown command {command!r}"})
    finally:
        await coordinator.close()
        await engine.dispose()
    reply({"closed": True})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
