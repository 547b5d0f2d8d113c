"""``POST /v1/checks``: ``kvcap check`` over HTTP, for manifests pasted into the plan explorer or sent by tools.

The body carries the manifest text (multi-document YAML or JSON, as ``kvcap check -f`` reads it); the answer is
the same report ``kvcap check --json`` prints: one result per object with its verdict, reason, warnings and the
plans kvcap made, a summary and the exit code the CLI would return. The verdict uses the server's in-memory
catalog and admission mode, exactly as the webhook would, and never touches the database. Parsing and planning
run in a worker thread; the request body limit bounds the work.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from service.admission.check import CheckResult, check_offline, exit_code, parse_text, summary, unreadable
from service.admission.check import Document as ManifestDocument
from service.admission.policy import PolicyConfig
from service.catalog.snapshot import CatalogHolder, CatalogSnapshot
from service.settings import Settings

router = APIRouter(prefix="/v1", tags=["admission"])


class CheckRequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    manifest: Annotated[
        str, Field(min_length=1, description="multi-document YAML or JSON, as kvcap check reads")
    ]
    source: Annotated[str, Field(max_length=200)] = "manifest"


class CheckReport(BaseModel):
    results: list[dict[str, Any]]
    summary: dict[str, int]
    exit_code: int = Field(description="what `kvcap check` would exit with: 0 pass, 1 denied, 2 unreadable")


def check_manifest(
    text: str, source: str, snapshot: CatalogSnapshot, config: PolicyConfig
) -> list[CheckResult]:
    results: list[CheckResult] = []
    for item in parse_text(text, source):
        if isinstance(item, ManifestDocument):
            results.append(check_offline(item, snapshot, config))
        else:
            results.append(unreadable(item))
    return results


@router.post(
    "/checks",
    response_model=CheckReport,
    summary="Admission verdicts for a pasted manifest (what `kvcap check --json` prints)",
    responses={422: {"description": "no manifest text"}},
)
async def create_check(request: Request, body: CheckRequestBody) -> CheckReport:
    holder: CatalogHolder = request.app.state.catalog
    settings: Settings = request.app.state.settings
    results = await anyio.to_thread.run_sync(
        check_manifest, body.manifest, body.source, holder.snapshot, PolicyConfig.from_settings(settings)
    )
    return CheckReport(
        results=[r.to_json() for r in results], summary=summary(results), exit_code=exit_code(results)
    )
