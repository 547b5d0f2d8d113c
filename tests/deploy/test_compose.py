"""The container image and the docker compose demo: the Dockerfile builds a non-root image from the lock file that
never writes outside /tmp, hadolint finds nothing in it, and docker-compose.yml (checked by docker compose's own
``config``) wires kvcap, Postgres, the vLLM simulator, Prometheus and Grafana together with pinned images.

hadolint and docker compose are external binaries (``.ci/install-tools`` installs both). Without them those tests
skip, unless ``KVCAP_REQUIRE_TOOLS=1`` (CI), where a missing tool fails them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.tools import find, missing, require_tool, run

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

SERVICES = {"postgres", "kvcap", "vllm-sim", "loadgen", "kvcap-register", "prometheus", "grafana"}
REGISTER_BODY = {
    "namespace": "demo",
    "name": "llama-8b",
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm-80gb",
    "tensor_parallel_size": 1,
    "max_model_len": 8192,
    "replicas": 1,
    "live": {"scrape_urls": ["http://vllm-sim:8000/metrics"]},
}


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict[str, Any]:
    return compose()["services"]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, arguments = line.partition(" ")
            pairs.append((instruction.upper(), arguments.strip()))
    return pairs


def runtime_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (instruction, _) in enumerate(instructions) if instruction == "FROM")
    return instructions[last_from:]


def test_compose_has_every_service():
    assert set(services()) == SERVICES


def test_kvcap_waits_for_a_healthy_postgres():
    postgres = services()["postgres"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert any(volume.startswith("postgres-data:") for volume in postgres["volumes"])
    assert "postgres-data" in compose()["volumes"]
    kvcap = services()["kvcap"]
    assert kvcap["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_kvcap_migrates_loads_the_catalog_then_serves():
    kvcap = services()["kvcap"]
    assert kvcap["build"] == "."
    assert kvcap["entrypoint"] == ["sh", "-c"]
    (command,) = kvcap["command"]
    assert command.index("kvcap migrate") < command.index("kvcap catalog load") < command.index("kvcap serve")
    assert "--host 0.0.0.0 --port 8000" in command
    environment = kvcap["environment"]
    assert environment["KVCAP_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert "@postgres:5432/" in environment["KVCAP_DATABASE_URL"]
    assert "vllm-sim" in environment["KVCAP_SCRAPE_ALLOWED_HOSTS"].split(",")
    assert "8000:8000" in kvcap["ports"]


def test_registration_posts_the_demo_deployment_once_kvcap_is_ready():
    (script,) = services()["kvcap-register"]["command"]
    assert "http://kvcap:8000/readyz" in script
    assert "http://kvcap:8000/v1/deployments" in script
    body = json.loads(re.search(r"-d '(\{.*\})'", script).group(1))
    assert body == REGISTER_BODY


def test_simulator_serves_vllm_metrics_for_the_registered_model():
    simulator = services()["vllm-sim"]
    assert simulator["image"].startswith("ghcr.io/llm-d/llm-d-inference-sim:")
    args = simulator["command"]
    flags = {
        args[i]: args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True
        for i, a in enumerate(args)
        if a.startswith("--")
    }
    assert flags["--port"] == "8000"
    assert flags["--max-model-len"] == str(REGISTER_BODY["max_model_len"])
    assert flags["--enable-kvcache"] is True
    (loadgen,) = services()["loadgen"]["command"]
    assert "http://vllm-sim:8000/v1/completions" in loadgen
    assert flags["--model"] in loadgen


def test_prometheus_and_grafana_use_the_repository_configuration():
    prometheus = services()["prometheus"]
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "./deploy/prometheus/rules:/etc/prometheus/rules:ro" in prometheus["volumes"]
    grafana = services()["grafana"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    for path in (
        "deploy/prometheus/prometheus.yml",
        "deploy/prometheus/rules",
        "deploy/grafana/provisioning",
    ):
        assert (ROOT / path).exists(), path


def test_every_image_is_pinned():
    for name, service in services().items():
        image = service.get("image")
        if image is None:
            assert "build" in service, name
            continue
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest", f"{name}: {image}"
    assert ":latest" not in COMPOSE.read_text()


def compose_command() -> list[str]:
    """docker compose: the standalone binary .ci/install-tools installs, or the docker CLI's plugin."""
    standalone = find("docker-compose")
    if standalone:
        return [standalone]
    docker = find("docker")
    if docker and run([docker, "compose", "version"], timeout=30).returncode == 0:
        return [docker, "compose"]
    missing(
        "docker compose is not installed (needed to check docker-compose.yml; .ci/install-tools installs it)"
    )
    raise AssertionError("unreachable")


def test_docker_compose_config_is_valid():
    result = run([*compose_command(), "-f", COMPOSE, "config", "--quiet"], timeout=60)
    assert result.returncode == 0, result.stderr


def test_docker_compose_config_resolves_the_demo_defaults():
    result = run([*compose_command(), "-f", COMPOSE, "config", "--format", "json"], timeout=60)
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout)["services"]
    assert set(resolved) == SERVICES
    assert resolved["kvcap"]["environment"]["KVCAP_API_TOKENS"] == "kvcap-demo-token"
    assert resolved["kvcap-register"]["environment"]["KVCAP_TOKEN"] == "kvcap-demo-token"


def test_hadolint_finds_nothing_in_the_dockerfile():
    hadolint = require_tool("hadolint", "lint the Dockerfile")
    result = run([hadolint, "--no-color", "--failure-threshold", "info", DOCKERFILE])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_is_multi_stage_on_python_3_11_slim():
    froms = [arguments for instruction, arguments in dockerfile_instructions() if instruction == "FROM"]
    assert len(froms) >= 2
    assert all(f.split()[0] == "python:3.11-slim" for f in froms)


def test_runtime_image_runs_as_a_non_root_user():
    users = [arguments for instruction, arguments in runtime_stage() if instruction == "USER"]
    assert users, "the runtime stage has no USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert user == "10001"


def test_runtime_image_has_a_healthcheck_on_healthz():
    checks = [arguments for instruction, arguments in runtime_stage() if instruction == "HEALTHCHECK"]
    assert len(checks) == 1
    assert "urllib.request" in checks[0]
    assert "/healthz" in checks[0]


def test_runtime_image_entrypoint_command_and_environment():
    stage = dict(runtime_stage())
    assert json.loads(stage["ENTRYPOINT"]) == ["kvcap"]
    assert json.loads(stage["CMD"]) == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert stage["EXPOSE"] == "8000"
    environment = " ".join(arguments for instruction, arguments in runtime_stage() if instruction == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in environment
    assert "PYTHONUNBUFFERED=1" in environment


def test_image_copies_only_what_it_needs():
    sources = set()
    for instruction, arguments in dockerfile_instructions():
        if instruction == "COPY" and not arguments.startswith("--from"):
            sources |= set(arguments.split()[:-1])
    assert sources == {"requirements.lock", "pyproject.toml", "README.md", "service/"}
    ignored = DOCKERIGNORE.read_text().splitlines()
    assert "*" in ignored
    assert {"!requirements.lock", "!pyproject.toml", "!README.md", "!service"} <= set(ignored)


def test_dependencies_come_from_the_lock_file_and_nothing_else():
    runs = [arguments for instruction, arguments in dockerfile_instructions() if instruction == "RUN"]
    installs = [r for r in runs if "pip install" in r]
    assert installs[0] == "pip install --no-deps -r requirements.lock"
    # kvcap's own wheel: no dependency resolution (everything came from the lock) and not editable.
    assert all("--no-deps" in r for r in installs)
    assert not any(" -e " in r for r in installs)


def test_runtime_image_writes_nothing_outside_tmp():
    """The chart runs it with readOnlyRootFilesystem: bytecode is compiled at build time and never written, HOME
    and the working directory are the /tmp emptyDir, and only the virtual environment is copied in."""
    stage = runtime_stage()
    environment = " ".join(arguments for instruction, arguments in stage if instruction == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in environment
    assert "HOME=/tmp" in environment
    assert dict(stage)["WORKDIR"] == "/tmp"
    copies = [arguments for instruction, arguments in stage if instruction == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]
    build_runs = " ".join(
        a for i, a in dockerfile_instructions()[: len(dockerfile_instructions()) - len(stage)] if i == "RUN"
    )
    assert "python -m compileall" in build_runs
    assert "kvcap migrate" in build_runs  # the wheel finds its migrations
