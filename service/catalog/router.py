"""``/v1/gpus`` and ``/v1/models``: reads are open, writes need a bearer token when tokens are configured.

Single entries carry an ``ETag``; ``PATCH``/``DELETE`` with a stale ``If-Match`` get 412 and change nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.api.deps import SessionDep, WriterDep
from service.api.etag import none_match
from service.api.pagination import Page, PageDep
from service.catalog.schemas import (
    GpuCreate,
    GpuRead,
    GpuUpdate,
    ModelCreate,
    ModelImport,
    ModelImportResult,
    ModelRead,
    ModelUpdate,
)
from service.catalog.service import CatalogService
from service.catalog.snapshot import CatalogHolder

router = APIRouter(prefix="/v1")

ERRORS = {
    401: {"description": "a bearer token is required"},
    403: {"description": "the token may not write"},
    404: {"description": "no such entry"},
    409: {"description": "an entry with that name exists"},
    412: {"description": "If-Match does not match the current ETag"},
    422: {"description": "invalid field values"},
    503: {"description": "the database is unavailable"},
}
IfMatch = Annotated[str | None, Header(description="ETag from a previous GET; a stale one gets 412")]
IfNoneMatch = Annotated[str | None, Header()]


def _service(request: Request, session: AsyncSession) -> CatalogService:
    holder: CatalogHolder | None = getattr(request.app.state, "catalog", None)
    maker: async_sessionmaker[AsyncSession] | None = getattr(request.app.state, "sessionmaker", None)
    return CatalogService(session, holder=holder, sessionmaker=maker)


# GPUs -------------------------------------------------------------------------------------------------------
@router.get("/gpus", response_model=Page[GpuRead], tags=["gpus"], summary="List GPUs")
async def list_gpus(
    request: Request,
    session: SessionDep,
    page: PageDep,
    vendor: Annotated[str | None, Query(max_length=32, description="nvidia, amd, …")] = None,
    q: Annotated[str | None, Query(max_length=100, description="substring of name or display name")] = None,
) -> Page[GpuRead]:
    return await _service(request, session).list_gpus(page=page, vendor=vendor, q=q)


@router.get(
    "/gpus/{name}",
    response_model=GpuRead,
    tags=["gpus"],
    responses={404: ERRORS[404], 304: {"description": "not modified"}},
)
async def get_gpu(
    request: Request, session: SessionDep, name: str, response: Response, if_none_match: IfNoneMatch = None
) -> GpuRead | Response:
    entry = await _service(request, session).get_gpu(name)
    if none_match(if_none_match, entry.etag):
        return Response(status_code=304, headers={"ETag": entry.etag})
    response.headers["ETag"] = entry.etag
    return GpuRead.model_validate(entry)


@router.post(
    "/gpus",
    response_model=GpuRead,
    status_code=status.HTTP_201_CREATED,
    tags=["gpus"],
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 409, 422, 503)},
)
async def create_gpu(request: Request, session: SessionDep, body: GpuCreate, response: Response) -> GpuRead:
    entry = await _service(request, session).create_gpu(body)
    response.headers["ETag"] = entry.etag
    response.headers["Location"] = f"/v1/gpus/{entry.name}"
    return GpuRead.model_validate(entry)


@router.patch(
    "/gpus/{name}",
    response_model=GpuRead,
    tags=["gpus"],
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 404, 412, 422, 503)},
)
async def update_gpu(
    request: Request,
    session: SessionDep,
    name: str,
    body: GpuUpdate,
    response: Response,
    if_match: IfMatch = None,
) -> GpuRead:
    entry = await _service(request, session).update_gpu(name, body, if_match=if_match)
    response.headers["ETag"] = entry.etag
    return GpuRead.model_validate(entry)


@router.delete(
    "/gpus/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["gpus"],
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 404, 412, 503)},
)
async def delete_gpu(request: Request, session: SessionDep, name: str, if_match: IfMatch = None) -> Response:
    await _service(request, session).delete_gpu(name, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# Models -----------------------------------------------------------------------------------------------------
@router.get("/models", response_model=Page[ModelRead], tags=["models"], summary="List models")
async def list_models(
    request: Request,
    session: SessionDep,
    page: PageDep,
    family: Annotated[str | None, Query(max_length=64, description="llama, qwen3, gemma3, …")] = None,
    q: Annotated[str | None, Query(max_length=100, description="substring of name or HF id")] = None,
) -> Page[ModelRead]:
    return await _service(request, session).list_models(page=page, family=family, q=q)


@router.post(
    "/models/import",
    response_model=ModelImportResult,
    status_code=status.HTTP_201_CREATED,
    tags=["models"],
    dependencies=[WriterDep],
    summary="Import a model from its Hugging Face config.json",
    responses={k: ERRORS[k] for k in (401, 403, 409, 422, 503)},
)
async def import_model(
    request: Request,
    session: SessionDep,
    body: ModelImport,
    response: Response,
    dry_run: Annotated[
        bool, Query(description="map the config and return the entry without storing it")
    ] = False,
) -> ModelImportResult:
    result = await _service(request, session).import_model(body, dry_run=dry_run)
    if dry_run:
        response.status_code = status.HTTP_200_OK
    elif isinstance(result.model, ModelRead):
        response.headers["Location"] = f"/v1/models/{result.model.name}"
    return result


@router.get(
    "/models/{name}",
    response_model=ModelRead,
    tags=["models"],
    responses={404: ERRORS[404], 304: {"description": "not modified"}},
)
async def get_model(
    request: Request, session: SessionDep, name: str, response: Response, if_none_match: IfNoneMatch = None
) -> ModelRead | Response:
    entry = await _service(request, session).get_model(name)
    if none_match(if_none_match, entry.etag):
        return Response(status_code=304, headers={"ETag": entry.etag})
    response.headers["ETag"] = entry.etag
    return ModelRead.model_validate(entry)


@router.post(
    "/models",
    response_model=ModelRead,
    status_code=status.HTTP_201_CREATED,
    tags=["models"],
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 409, 422, 503)},
)
async def create_model(
    request: Request, session: SessionDep, body: ModelCreate, response: Response
) -> ModelRead:
    entry = await _service(request, session).create_model(body)
    response.headers["ETag"] = entry.etag
    response.headers["Location"] = f"/v1/models/{entry.name}"
    return ModelRead.model_validate(entry)


@router.patch(
    "/models/{name}",
    response_model=ModelRead,
    tags=["models"],
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 404, 412, 422, 503)},
)
async def update_model(
    request: Request,
    session: SessionDep,
    name: str,
    body: ModelUpdate,
    response: Response,
    if_match: IfMatch = None,
) -> ModelRead:
    entry = await _service(request, session).update_model(name, body, if_match=if_match)
    response.headers["ETag"] = entry.etag
    return ModelRead.model_validate(entry)


@router.delete(
    "/models/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["models"],
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 404, 412, 503)},
)
async def delete_model(
    request: Request, session: SessionDep, name: str, if_match: IfMatch = None
) -> Response:
    await _service(request, session).delete_model(name, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
