"""The ``kvcap`` command line: serve, migrate, load the catalog, and plan/check without a server.

Exit codes: 0 success; 1 the answer is "no" (a deployment that will not start, a denied manifest); 2 bad input
or an environment problem (unreadable file, database unreachable).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer
from rich.console import Console

from service.settings import get_settings

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="kvcap: KV-cache capacity planning for vLLM"
)
catalog_app = typer.Typer(no_args_is_help=True, help="Built-in model and GPU catalog")
app.add_typer(catalog_app, name="catalog")

err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = 8000,
) -> None:
    """Run the HTTP service (one process; scale out with replicas)."""
    import uvicorn

    uvicorn.run(
        "service.app:create_app", factory=True, host=host, port=port, log_level="info", proxy_headers=True
    )


@app.command()
def migrate(
    database_url: Annotated[str | None, typer.Option(help="defaults to KVCAP_DATABASE_URL")] = None,
) -> None:
    """Apply database migrations (Alembic upgrade head)."""
    from service.db.migrate import upgrade

    url = database_url or get_settings().database_url
    try:
        upgrade(url)
    except Exception as exc:
        raise _fail(f"migration failed: {type(exc).__name__}: {exc}") from None
    err.print("database is at the newest schema revision")


@catalog_app.command("load")
def catalog_load(
    database_url: Annotated[str | None, typer.Option(help="defaults to KVCAP_DATABASE_URL")] = None,
) -> None:
    """Insert or refresh the built-in GPUs and models (idempotent; entries edited through the API are kept)."""
    from service.catalog.builtin import load_builtin
    from service.db.session import create_engine, create_sessionmaker
    from service.settings import normalize_database_url

    async def _run() -> str:
        engine = create_engine(normalize_database_url(database_url or get_settings().database_url))
        try:
            async with create_sessionmaker(engine)() as session:
                result = await load_builtin(session)
                await session.commit()
        finally:
            await engine.dispose()
        return (
            f"catalog loaded: {result.inserted} inserted, {result.updated} updated, "
            f"{result.unchanged} unchanged, {result.kept_user_edits} kept (edited through the API)"
        )

    try:
        message = asyncio.run(_run())
    except Exception as exc:
        raise _fail(
            f"catalog load failed: {type(exc).__name__}: {exc} (did you run `kvcap migrate`?)"
        ) from None
    err.print(message)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
