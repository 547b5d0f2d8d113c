"""A tiny real HTTP/1.1 server on 127.0.0.1 (raw ``asyncio.start_server``) with misbehaving routes.

It exists to prove the scraper against real sockets, not a mock transport: a route that never answers, one
that sends garbage, one that redirects to the metadata address, one that streams 50 MB and records how much
of it it managed to send before kvcap hung up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]

HUGE_BYTES = 50 * 1024 * 1024


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def response(status: str, body: bytes, *, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class StubServer:
    """Routes: ``bodies`` (path → 200 body) plus the fixed misbehaving routes below."""

    def __init__(self, bodies: dict[str, bytes] | None = None) -> None:
        self.bodies = dict(bodies or {})
        self.huge_sent = 0
        self.huge_done = asyncio.Event()
        self.requests: list[str] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            self.requests.append(path)
            await self._route(path, writer)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, path: str, writer: asyncio.StreamWriter) -> None:
        if path in self.bodies:
            writer.write(response("200 OK", self.bodies[path], headers={"Content-Type": "text/plain"}))
        elif path == "/hang":
            await asyncio.Event().wait()  # accept, read the request, never answer
        elif path == "/garbage":
            writer.write(response("200 OK", b"\x00\x01 this is { not an exposition at all\n" * 20))
        elif path == "/html":
            writer.write(response("200 OK", b"<html><body><h1>Welcome to nginx!</h1></body></html>\n"))
        elif path == "/error":
            writer.write(response("500 Internal Server Error", b"boom"))
        elif path == "/redirect":
            location = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
            writer.write(response("302 Found", b"", headers={"Location": location}))
        elif path == "/huge":
            await self._huge(writer)
            return
        else:
            writer.write(response("404 Not Found", b"no such route"))
        await writer.drain()

    async def _huge(self, writer: asyncio.StreamWriter) -> None:
        """50 MB of valid-looking lines, no Content-Length (ends at close), counting what gets out."""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        line = b'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
        chunk = line * (65536 // len(line))
        try:
            while self.huge_sent < HUGE_BYTES:
                writer.write(chunk)
                await writer.drain()
                self.huge_sent += len(chunk)
        except (ConnectionError, OSError):
            pass
        finally:
            self.huge_done.set()
