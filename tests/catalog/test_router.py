"""HTTP behaviour of /v1/gpus and /v1/models: listing, ETags, validation, conflicts and auth."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from service.settings import Settings
from tests.conftest import build_app

NEW_GPU = {
    "name": "test-gpu-48gb",
    "vendor": "nvidia",
    "memory_bytes": 48 * 2**30,
    "usable_memory_bytes": 47 * 2**30,
    "memory_bandwidth_bytes_per_second": 960 * 10**9,
    "source": "https://example.com/datasheet.pdf",
}

NEW_MODEL = {
    "name": "tiny-llama",
    "hf_id": "example/tiny-llama",
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1000,
    "num_parameters": 5_000_000,
    "source": "test fixture",
}


async def test_lists_at_least_twenty_gpus_each_with_a_source(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/gpus", params={"limit": 500})
    assert response.status_code == 200
    body = response.json()
    assert body["total"] >= 20
    assert len(body["items"]) == body["total"]
    assert all(item["source"] for item in body["items"])
    names = {item["name"] for item in body["items"]}
    for required in (
        "t4",
        "a10g",
        "l4",
        "l40s",
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm-80gb",
        "h100-pcie-80gb",
        "h200",
        "b200",
        "rtx-4090",
        "rtx-a6000",
        "mi300x",
    ):
        assert required in names


async def test_lists_at_least_twenty_five_models_each_with_a_source(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/models", params={"limit": 500})).json()
    assert body["total"] >= 25
    assert all(item["source"] for item in body["items"])


async def test_filters_gpus_by_vendor_and_models_by_family(client: httpx.AsyncClient) -> None:
    amd = (await client.get("/v1/gpus", params={"vendor": "amd"})).json()["items"]
    assert amd and all(item["vendor"] == "amd" for item in amd)
    llama = (await client.get("/v1/models", params={"family": "llama", "limit": 500})).json()["items"]
    assert {"llama-2-7b", "llama-3.1-8b"} <= {item["name"] for item in llama}
    assert all(item["family"] == "llama" for item in llama)


async def test_paginates_with_limit_and_offset(client: httpx.AsyncClient) -> None:
    first = (await client.get("/v1/models", params={"limit": 5, "offset": 0})).json()
    second = (await client.get("/v1/models", params={"limit": 5, "offset": 5})).json()
    assert len(first["items"]) == 5 and len(second["items"]) == 5
    assert not {i["name"] for i in first["items"]} & {i["name"] for i in second["items"]}
    assert (await client.get("/v1/models", params={"limit": 0})).status_code == 422


async def test_get_returns_etag_and_honours_if_none_match(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/gpus/h100-sxm-80gb")
    assert response.status_code == 200
    etag = response.headers["etag"]
    assert response.json()["vendor"] == "nvidia"
    cached = await client.get("/v1/gpus/h100-sxm-80gb", headers={"If-None-Match": etag})
    assert cached.status_code == 304


async def test_unknown_entry_is_404_in_the_error_shape(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models/no-such-model")
    assert response.status_code == 404
    assert response.json()["error"] == "NotFound"
    assert "no-such-model" in response.json()["detail"]


async def test_creates_a_gpu_and_rejects_a_duplicate_name(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/gpus", json=NEW_GPU)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/gpus/test-gpu-48gb"
    assert created.json()["origin"] == "user"
    duplicate = await client.post("/v1/gpus", json=NEW_GPU)
    assert duplicate.status_code == 409
    assert duplicate.json()["error"] == "Conflict"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"num_hidden_layers": -1}, "num_hidden_layers"),
        ({"torch_dtype": "float12"}, "torch_dtype"),
        ({"name": "Not A Slug!"}, "name"),
        ({"num_key_value_heads": 16}, "num_key_value_heads"),
        ({"layer_types": ["full_attention"] * 3}, "layer_types"),
        ({"layer_types": ["sliding_attention"] * 4}, "sliding_window"),
    ],
)
async def test_rejects_an_invalid_model_with_the_field_named_and_stores_nothing(
    client: httpx.AsyncClient, patch: dict[str, object], field: str
) -> None:
    response = await client.post("/v1/models", json=NEW_MODEL | patch)
    assert response.status_code == 422, response.text
    body = response.json()
    assert field in body["detail"]
    assert any(field in [str(p) for p in err["loc"]] for err in body["errors"])
    assert (await client.get(f"/v1/models/{(NEW_MODEL | patch)['name']}")).status_code in (404, 422)


async def test_malformed_json_is_a_422_not_a_500(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/gpus", content=b'{"name": "x",', headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"] == "RequestValidationError"


async def test_patch_with_a_stale_if_match_is_412_and_changes_nothing(client: httpx.AsyncClient) -> None:
    original = await client.get("/v1/gpus/l4")
    etag = original.headers["etag"]
    ok = await client.patch("/v1/gpus/l4", json={"price_per_hour_usd": 0.5}, headers={"If-Match": etag})
    assert ok.status_code == 200, ok.text
    assert ok.headers["etag"] != etag
    stale = await client.patch("/v1/gpus/l4", json={"price_per_hour_usd": 9.9}, headers={"If-Match": etag})
    assert stale.status_code == 412
    assert stale.json()["error"] == "PreconditionFailed"
    assert (await client.get("/v1/gpus/l4")).json()["price_per_hour_usd"] == 0.5


async def test_patch_that_would_make_the_entry_invalid_is_422_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    before = (await client.get("/v1/models/llama-3.1-8b")).json()
    response = await client.patch("/v1/models/llama-3.1-8b", json={"num_key_value_heads": 64})
    assert response.status_code == 422
    after = (await client.get("/v1/models/llama-3.1-8b")).json()
    assert after == before


async def test_patch_null_clears_an_optional_field_but_not_a_required_one(client: httpx.AsyncClient) -> None:
    cleared = await client.patch("/v1/gpus/l4", json={"price_per_hour_usd": None})
    assert cleared.status_code == 200
    assert cleared.json()["price_per_hour_usd"] is None
    required = await client.patch("/v1/gpus/l4", json={"memory_bytes": None})
    assert required.status_code == 422


async def test_usable_memory_cannot_exceed_the_datasheet_capacity(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/gpus", json=NEW_GPU | {"usable_memory_bytes": 49 * 2**30})
    assert response.status_code == 422
    assert "usable_memory_bytes" in response.json()["detail"]


async def test_delete_honours_if_match(client: httpx.AsyncClient) -> None:
    await client.post("/v1/models", json=NEW_MODEL)
    etag = (await client.get("/v1/models/tiny-llama")).headers["etag"]
    assert (await client.delete("/v1/models/tiny-llama", headers={"If-Match": '"0-0"'})).status_code == 412
    assert (await client.delete("/v1/models/tiny-llama", headers={"If-Match": etag})).status_code == 204
    assert (await client.get("/v1/models/tiny-llama")).status_code == 404


async def test_editing_a_builtin_entry_marks_it_as_user_data(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/gpus/t4")).json()["origin"] == "builtin"
    edited = await client.patch("/v1/gpus/t4", json={"notes": "our T4s run with ECC off"})
    assert edited.json()["origin"] == "user"


async def test_oversized_body_is_rejected_with_413(client: httpx.AsyncClient) -> None:
    huge = {"name": "big", "hf_config": {"pad": "x" * 2_000_000}}
    response = await client.post("/v1/models/import", json=huge)
    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"


class TestAuth:
    @pytest.fixture
    async def secured(
        self, database_url: str, engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
    ) -> httpx.AsyncClient:
        settings = Settings(database_url=database_url, api_tokens=["s3cret-token"])
        app = await build_app(settings, engine, sessionmaker)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")

    async def test_reads_are_open_when_tokens_are_configured(self, secured: httpx.AsyncClient) -> None:
        assert (await secured.get("/v1/gpus")).status_code == 200

    async def test_write_without_a_token_is_401(self, secured: httpx.AsyncClient) -> None:
        response = await secured.post("/v1/gpus", json=NEW_GPU)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")

    async def test_write_with_a_wrong_token_is_403(self, secured: httpx.AsyncClient) -> None:
        response = await secured.post("/v1/gpus", json=NEW_GPU, headers={"Authorization": "Bearer nope"})
        assert response.status_code == 403

    async def test_write_with_the_token_succeeds(self, secured: httpx.AsyncClient) -> None:
        response = await secured.post(
            "/v1/gpus", json=NEW_GPU, headers={"Authorization": "Bearer s3cret-token"}
        )
        assert response.status_code == 201

    async def test_a_hashed_token_is_accepted(
        self, database_url: str, engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
    ) -> None:
        import hashlib

        digest = hashlib.sha256(b"hashed-only").hexdigest()
        app = await build_app(
            Settings(database_url=database_url, api_token_sha256=[digest]), engine, sessionmaker
        )
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
            response = await c.post("/v1/gpus", json=NEW_GPU, headers={"Authorization": "Bearer hashed-only"})
        assert response.status_code == 201


async def test_healthz_and_readyz(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["database"] == "ok"


async def test_a_periodic_reload_of_an_empty_database_catalog_keeps_serving_the_builtin_one(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    # `kvcap serve` before `kvcap catalog load`: start-up serves the built-in catalog, and so must every refresh
    # after it (an empty snapshot would turn every plan into "unknown model").
    from sqlalchemy import delete

    from service.catalog.builtin import builtin_snapshot
    from service.catalog.orm import GpuEntry, ModelEntry
    from service.catalog.snapshot import CatalogHolder

    async with sessionmaker() as session:
        await session.execute(delete(ModelEntry))
        await session.execute(delete(GpuEntry))
        await session.commit()
    holder = CatalogHolder(builtin_snapshot())
    generation = holder.generation
    snapshot = await holder.reload(sessionmaker)
    assert snapshot.source == "builtin"
    assert "llama-3.1-8b" in holder.snapshot.models and "l4" in holder.snapshot.gpus
    assert holder.generation == generation  # same content: caches stay warm
