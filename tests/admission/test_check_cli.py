"""`kvcap check -f`: files, directories and stdin; exit codes 0/1/2; lines and --json; offline and --server."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import typer
from fastapi import FastAPI
from typer.testing import CliRunner

import service.admission.cli as check_cli

from .test_webhook import offline_app

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]
RENDERED = DATA / "rendered-chart.yaml"
DENIED = DATA / "denied.yaml"


def kvcap() -> typer.Typer:
    """A stand-in for the real `kvcap` app with just this command registered the way the integrator will."""
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """kvcap (test stand-in)."""

    app.command("check")(check_cli.check)
    return app


runner = CliRunner()


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(kvcap(), ["check", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_exit_0_when_every_object_passes_with_a_line_per_object() -> None:
    code, out, err = run("-f", str(RENDERED))
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("skipped    ServiceAccount chat-llm-serving")
    assert lines[0].endswith("not a vLLM workload")
    assert lines[3].startswith("allowed    Deployment chat-llm-serving (")
    assert "rendered-chart.yaml#4): llama-3.1-8b on 1 × l4 (TP 1, PP 1):" in lines[3]
    assert "5 object(s): 1 allowed, 4 skipped" in err


def test_exit_1_when_any_object_is_denied_and_the_reason_says_what_to_change() -> None:
    code, out, _ = run("-f", str(DENIED))
    assert code == 1
    denied = [line for line in out.splitlines() if line.startswith("denied")]
    assert len(denied) == 1
    assert denied[0].startswith("denied     Deployment team-a/llama-70b (")
    assert "weights do not fit" in denied[0]
    assert "use tensor-parallel-size 8 with 8 nvidia.com/gpu" in denied[0]


def test_admission_review_fixtures_are_read_as_their_objects() -> None:
    code, out, _ = run("-f", str(DATA / "statefulset-llama-8b-131k-one-l4.json"))
    assert code == 1
    assert "set --max-model-len ≤ " in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: [unclosed\n", "not valid YAML (line 3)"),
        ("- just\n- a list\n", "not a Kubernetes object (no kind)"),
    ],
)
def test_exit_2_for_unreadable_input_even_next_to_a_denial(tmp_path: Path, text: str, message: str) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(text)
    code, out, _ = run("-f", str(DENIED), "-f", str(broken))
    assert code == 2
    assert any(line.startswith("unreadable") and message in line for line in out.splitlines())


def test_exit_2_for_a_missing_path() -> None:
    code, out, _ = run("-f", "does/not/exist.yaml")
    assert code == 2
    assert "no such file or directory" in out


def test_a_directory_is_searched_recursively(tmp_path: Path) -> None:
    (tmp_path / "team-a").mkdir()
    shutil.copy(RENDERED, tmp_path / "rendered.yaml")
    shutil.copy(DENIED, tmp_path / "team-a" / "servers.yml")
    (tmp_path / "README.md").write_text("# not YAML")
    code, out, _ = run("-f", str(tmp_path))
    assert code == 1
    assert len(out.splitlines()) == 7


def test_json_with_tab_indentation(tmp_path: Path) -> None:
    path = tmp_path / "deployment.json"
    path.write_text(json.dumps(_denied_object(), indent="\t"))
    code, out, _ = run("-f", str(path))
    assert code == 1
    assert "weights do not fit" in out


def test_stdin_with_a_kind_list() -> None:
    docs = {"apiVersion": "v1", "kind": "List", "items": [json.loads(json.dumps(_denied_object()))]}
    code, out, _ = run("-f", "-", stdin=json.dumps(docs))
    assert code == 1
    assert "(-#1)" in out


def test_json_output_for_pipelines() -> None:
    code, out, _ = run("-f", str(DENIED), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["exit_code"] == 1
    assert report["summary"] == {
        "objects": 2,
        "allowed": 1,
        "denied": 1,
        "would_deny": 0,
        "skipped": 0,
        "unreadable": 0,
    }
    first, second = report["results"]
    assert (first["verdict"], first["namespace"], first["name"]) == ("allowed", "team-a", "llama-8b")
    assert first["plans"][0]["model"] == "llama-3.1-8b"
    assert second["verdict"] == "denied"
    assert second["reason"].startswith("weights do not fit")


def in_process(app: FastAPI) -> Callable[[], httpx.Client]:
    """A sync client whose requests are served by ``app`` in-process (what ``--server`` would reach)."""

    def handler(request: httpx.Request) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://kvcap.test") as client:
                return await client.request(
                    request.method, request.url.path, content=request.content, headers=request.headers
                )

        answer = asyncio.run(call())
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    return lambda: httpx.Client(transport=httpx.MockTransport(handler))


def test_server_mode_asks_the_webhook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_cli, "http_client", in_process(offline_app()))
    code, out, _ = run("-f", str(DENIED), "-f", str(RENDERED), "--server", "http://kvcap.test")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("allowed    Deployment team-a/llama-8b")
    assert lines[1].startswith("denied     Deployment team-a/llama-70b")
    assert "weights do not fit" in lines[1]
    assert lines[2].startswith("skipped    ServiceAccount chat-llm-serving")


def test_server_mode_exits_2_when_the_server_has_no_webhook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_cli, "http_client", in_process(FastAPI()))
    code, _, err = run("-f", str(DENIED), "--server", "http://kvcap.test")
    assert code == 2
    assert "answered 404" in err


def test_server_mode_exits_2_when_the_server_cannot_be_reached() -> None:
    code, _, err = run("-f", str(DENIED), "--server", "http://127.0.0.1:1")
    assert code == 2
    assert "cannot reach http://127.0.0.1:1" in err


def _denied_object() -> dict[str, object]:
    obj: dict[str, object] = json.loads((DATA / "deployment-llama-70b-one-l4.json").read_text())["request"][
        "object"
    ]
    return obj


def _registered() -> bool:
    from typer.main import get_command

    from service.cli import app

    return "check" in getattr(get_command(app), "commands", {})


@pytest.mark.skipif(not _registered(), reason="`kvcap check` is not wired into service/cli.py yet")
def test_the_real_kvcap_check_command() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "service.cli", "check", "-f", str(RENDERED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    denied = subprocess.run(
        [sys.executable, "-m", "service.cli", "check", "-f", "-", "--json"],
        cwd=ROOT,
        input=DENIED.read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert denied.returncode == 1
    assert json.loads(denied.stdout)["summary"]["denied"] == 1
    missing = subprocess.run(
        [sys.executable, "-m", "service.cli", "check", "-f", "missing.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2
