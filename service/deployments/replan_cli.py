"""``kvcap replan``: ask a running kvcap server what the registered fleet needs under a change.

The registry lives in the server's database, so this command is a client of ``POST /v1/deployments/replan``
(``--url``, as ``--server`` is for ``plan``/``recommend``): it streams the NDJSON answer, draws a progress bar
on stderr (plain lines when stderr is not a terminal) and prints a delta table, or ``--json`` the same object
the endpoint returns as JSON. Exit 0 when every deployment is served under the change, 1 when one is not (does
not fit, misses its SLO, or could not be replanned), 2 for bad input or an unreachable server.

Only typer is imported at start-up; pydantic, httpx and rich load inside the command.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    import httpx
    from rich.console import Console

NDJSON = "application/x-ndjson"
DEFAULT_URL = "http://127.0.0.1:8000"


def _default_client(timeout_s: float) -> httpx.Client:
    import httpx

    return httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0))


# How the command talks HTTP; tests swap in a client bound to an in-process app.
http_client: Callable[[float], httpx.Client] = _default_client


def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _fail(message: str, code: int = 2) -> typer.Exit:
    _err().print(f"[red]error:[/red] {message}", markup=True)
    return typer.Exit(code)


def parse_labels(values: list[str] | None) -> dict[str, str]:
    """``--label team=search --label tier=prod`` (or ``team=search,tier=prod``) → a dict; else exit 2."""
    labels: dict[str, str] = {}
    for value in values or []:
        for part in value.split(","):
            key, sep, label = part.partition("=")
            if not sep or not key.strip():
                raise _fail(f"--label: expected key=value, got {part!r}")
            labels[key.strip()] = label.strip()
    return labels


def request_body(
    *,
    traffic: float,
    ttft_slo: float | None,
    tpot_slo: float | None,
    slo_percentile: str | None,
    engine: str | None,
    gpu: str | None,
    namespace: str | None,
    labels: dict[str, str],
    simulate: bool,
    spec_mean_acceptance_length: float | None = None,
) -> dict[str, Any]:
    """The request, validated here first so a typo is exit 2 without a round trip."""
    from pydantic import ValidationError

    from service.deployments.schemas import ReplanRequest

    slo = {
        "ttft_p95_seconds": ttft_slo,
        "tpot_seconds": tpot_slo,
        "slo_percentile": slo_percentile,
        "spec_mean_acceptance_length": spec_mean_acceptance_length,
    }
    fields: dict[str, Any] = {
        "traffic_multiplier": traffic,
        "slo": {k: v for k, v in slo.items() if v is not None} or None,
        "engine": engine,
        "gpu": gpu,
        "namespace": namespace,
        "labels": labels,
        "simulate": simulate,
    }
    try:
        body = ReplanRequest.model_validate(fields)
    except ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise _fail(detail) from None
    return body.model_dump(mode="json", exclude_none=True)


class _Progress:
    """A rich progress bar on a terminal; a plain ``replan: done/total`` line per update otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None

    def start(self, total: int) -> None:
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("replan"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=_err()
            )
            self._bar.start()
            self._task = self._bar.add_task("replan", total=total)
        else:
            sys.stderr.write(f"replan: {total} deployment(s)\n")
            sys.stderr.flush()

    def update(self, done: int, total: int, elapsed: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
        else:
            sys.stderr.write(f"replan: {done}/{total} ({elapsed:.1f} s)\n")
            sys.stderr.flush()

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def stream_replan(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST the change with ``Accept: application/x-ndjson`` and assemble the lines into the JSON body's shape."""
    import httpx

    endpoint = url.rstrip("/") + "/v1/deployments/replan"
    progress = _Progress()
    deltas: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    change: dict[str, Any] = body
    try:
        with (
            http_client(timeout_s) as client,
            client.stream("POST", endpoint, json=body, headers={"Accept": NDJSON}) as response,
        ):
            if response.status_code >= 400:
                response.read()
                try:
                    detail = response.json().get("detail")
                except ValueError:
                    detail = response.text[:500]
                raise _fail(f"{url} answered {response.status_code}: {detail}")
            for raw in response.iter_lines():
                if not raw.strip():
                    continue
                line = json.loads(raw)
                kind = line.pop("type", None)
                if kind == "start":
                    change = line.get("change", body)
                    progress.start(int(line["deployments"]))
                elif kind == "deployment":
                    deltas.append(line)
                elif kind == "progress":
                    progress.update(int(line["done"]), int(line["total"]), float(line["elapsed_seconds"]))
                elif kind == "summary":
                    summary = line
                elif kind == "error":
                    raise _fail(f"{url}: {line.get('message')}")
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach {url}: {type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise _fail(f"{url} sent a line that is not JSON: {exc}") from None
    finally:
        progress.stop()
    if summary is None:
        raise _fail(f"{url} ended the replan before its summary line")
    deltas.sort(key=lambda d: (d["namespace"], d["name"]))
    return {"change": change, "deployments": deltas, "summary": summary}


def _money(value: float | None) -> str:
    return "–" if value is None else f"${value:,.2f}"


def _signed(value: float | None, money: bool = False) -> str:
    if value is None:
        return "–"
    if money:
        return f"{'+' if value > 0 else '-' if value < 0 else '±'}${abs(value):,.2f}"
    return f"{int(value):+d}" if value else "0"


def _pair(current: Any, new: Any) -> str:
    current_text = "–" if current is None else str(current)
    new_text = "–" if new is None else str(new)
    return current_text if current_text == new_text else f"{current_text} → {new_text}"


def render(result: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    table = Table(title="replan", show_lines=False)
    for column in (
        "deployment",
        "status",
        "GPU",
        "TP",
        "replicas",
        "GPUs",
        "$/h",
        "Δ GPUs",
        "Δ $/h",
        "reason",
    ):
        table.add_column(column, overflow="fold")
    style = {"ok": "green", "does_not_fit": "red", "error": "red"}
    for d in result["deployments"]:
        current, new = d.get("current") or {}, d.get("new") or {}
        table.add_row(
            f"{d['namespace']}/{d['name']}",
            f"[{style[d['status']]}]{d['status']}[/]",
            _pair(current.get("gpu"), new.get("gpu")),
            _pair(current.get("tensor_parallel_size"), new.get("tensor_parallel_size")),
            _pair(current.get("replicas"), new.get("replicas")),
            _pair(current.get("gpus"), new.get("gpus")),
            _pair(_money(current.get("cost_per_hour_usd")), _money(new.get("cost_per_hour_usd"))),
            _signed(d.get("gpus_delta")),
            _signed(d.get("cost_per_hour_delta_usd"), money=True),
            d.get("error") or new.get("reason") or current.get("reason") or "",
        )
    console.print(table)
    s = result["summary"]
    console.print(
        f"{s['deployments']} deployment(s): {s['ok']} served, {s['does_not_fit']} not served, {s['errors']} "
        f"error(s), {s['changed']} changed; GPUs {s['gpus_current']} → {s['gpus_new']} "
        f"(+{s['gpus_added']} / -{s['gpus_freed']}); cost {_money(s['cost_per_hour_current_usd'])}/h → "
        f"{_money(s['cost_per_hour_new_usd'])}/h ({_signed(s['cost_per_hour_delta_usd'], money=True)}/h); "
        f"{s['configurations']} configuration(s), {'simulated' if s['simulate'] else 'roofline only'}, "
        f"{s['elapsed_seconds']:.1f} s",
        highlight=False,
    )


def replan_command(
    url: Annotated[
        str | None,
        typer.Option("--url", "--server", help=f"the kvcap server (default: $KVCAP_URL or {DEFAULT_URL})"),
    ] = None,
    traffic: Annotated[
        float, typer.Option("--traffic", help="traffic multiplier for every workload (1.5 = 50 % more)")
    ] = 1.0,
    ttft_slo: Annotated[float | None, typer.Option(help="new time-to-first-token SLO, seconds")] = None,
    tpot_slo: Annotated[float | None, typer.Option(help="new time-per-output-token SLO, seconds")] = None,
    slo_percentile: Annotated[
        str | None, typer.Option(help="where the SLOs are checked: p50, p99 or mean")
    ] = None,
    spec_mean_acceptance_length: Annotated[
        float | None,
        typer.Option(
            help="vLLM's 'Mean acceptance length' for every deployment with speculative decoding "
            "(default: each workload's own, else the method's)"
        ),
    ] = None,
    engine: Annotated[str | None, typer.Option(help="another vLLM release, e.g. vllm-0.11")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", "-g", help="another catalog GPU type")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="key=value (repeat, or comma-separate)")
    ] = None,
    simulate: Annotated[
        bool, typer.Option("--simulate/--no-simulate", help="--no-simulate: roofline only (fast)")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    timeout: Annotated[float, typer.Option(min=1, max=3600, help="seconds to wait for the server")] = 300.0,
) -> None:
    """What-if for every registered deployment: replicas, GPUs and cost under a change (nothing is stored).

    Exit 0 when every deployment is served under the change, 1 when one is not, 2 for bad input."""
    body = request_body(
        traffic=traffic,
        ttft_slo=ttft_slo,
        tpot_slo=tpot_slo,
        slo_percentile=slo_percentile,
        engine=engine,
        gpu=gpu,
        namespace=namespace,
        labels=parse_labels(label),
        simulate=simulate,
        spec_mean_acceptance_length=spec_mean_acceptance_length,
    )
    server = url or os.environ.get("KVCAP_URL") or DEFAULT_URL
    result = stream_replan(server, body, timeout)
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        import shutil

        from rich.console import Console

        render(result, Console(width=shutil.get_terminal_size((160, 24)).columns))
    summary = result["summary"]
    raise typer.Exit(0 if summary["does_not_fit"] == 0 and summary["errors"] == 0 else 1)
