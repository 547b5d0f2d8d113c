"""``POST /v1/plans`` answered at the ASGI edge (``service.api.edge.Edge``), ahead of FastAPI's router.

A plan of a catalog model is a pure function of the request body and of the in-memory catalog and
calibrations, so the lane answers from the body's bytes: a body it answered before (same bytes, same catalog
and calibration generations) is looked up by those bytes; any other is parsed as the route parses it
(``json.loads``, then ``PlanRequestBody``), planned, and kept in the app's ``PlanCache`` under the route's own
key (``request_key``), so the lane and the route share their plans. The answer is the route's answer, byte for byte.

The lane answers successes only. A body that does not validate, a plan that raises (unknown model, settings
vLLM refuses), an inline ``config.json`` (planned in a worker thread by the route) — every such request is left
to the route, which renders it as it always has: the lane never words an error.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from starlette.types import Scope

from service.planning.router import PlanCache, plan_bytes, request_key
from service.planning.schemas import PlanRequestBody

MAX_REMEMBERED_BODY = 16_384
"""Bodies longer than this are planned or served from the plan cache, not remembered by their bytes."""


class PlanLane:
    route = "/v1/plans"

    def __init__(self, state: Any, capacity: int = 512) -> None:
        self.state = (
            state  # the app's ``app.state``: the catalog and calibrations are replaced there on reload
        )
        self.capacity = capacity
        self._by_body: OrderedDict[tuple[bytes, int, int], bytes] = OrderedDict()

    def answer(self, scope: Scope, body: bytes) -> bytes | None:  # noqa: ARG002 (the lane protocol)
        state = self.state
        holder = getattr(state, "catalog", None)
        if holder is None:
            return None
        snapshot = holder.snapshot  # before the generation, as the route reads them
        calibrations = getattr(state, "calibrations", None)
        generation = calibrations.generation if calibrations else 0
        remembered = (body, holder.generation, generation)
        known = self._by_body.get(remembered)
        if known is not None:
            self._by_body.move_to_end(remembered)
            return known
        try:
            request = PlanRequestBody.model_validate(json.loads(body))
        except Exception:  # the route words the error
            return None
        if not isinstance(request.model, str):  # an inline config.json: the route plans it off the loop
            return None
        cache: PlanCache | None = getattr(state, "plan_cache", None)
        key = (request_key(request), holder.generation, generation)
        answer = cache.get(key) if cache is not None else None
        if answer is None:
            try:
                answer = plan_bytes(snapshot, request, calibrations)
            except Exception:  # an invalid plan: the route raises it again and renders it
                return None
            if cache is not None:
                cache.put(key, answer)
        if len(body) <= MAX_REMEMBERED_BODY:
            self._by_body[remembered] = answer
            while len(self._by_body) > self.capacity:
                self._by_body.popitem(last=False)
        return answer
