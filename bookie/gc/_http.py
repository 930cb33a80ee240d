"""REST endpoints of the garbage collector, as Starlette routes bound to a `GarbageCollector`.

* ``PUT /api/v1/bookie/gc`` - trigger a run now and return at once (BookKeeper's TriggerGCService).
  The body is optional; a JSON object may carry ``is_in_force_gc`` (default true: compact without
  waiting for the intervals), ``is_force_major_gc`` and ``is_force_minor_gc`` (default true: which
  compaction a forced run may do); BookKeeper's ``forceMajor`` / ``forceMinor`` are accepted too.
  Values are JSON booleans or the strings "true"/"false". Anything else is a 400 with a reason.
* ``GET /api/v1/bookie/gc`` - ``{"is_in_force_gc": "true" | "false"}``.
* ``GET /api/v1/bookie/gc_details`` - a one-element list with BookKeeper's GarbageCollectionStatus
  fields (``forceCompacting``, ``majorCompacting``, ``minorCompacting``, ``lastMajorCompactionTime``,
  ``lastMinorCompactionTime``, ``majorCompactionCounter``, ``minorCompactionCounter``) plus
  ``reclaimedSpaceViaDeletion`` / ``reclaimedSpaceViaCompaction`` (bytes) and the last run's outcome.
* ``GET /api/v1/bookie/gc/explain`` - every entry log with its size, usage, pinning ledgers and
  the reason it is still on disk (`GcExplanation.to_json`). ``?metadata=false`` skips the
  metadata lookups; ``?max_ledgers=N`` lists at most N ledgers per log (default 20).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._errors import BookieException
from ._gc import GarbageCollector

__all__ = ["gc_routes", "parse_gc_request"]

_KEYS = {
    "is_in_force_gc": "force",
    "is_force_major_gc": "allow_major",
    "is_force_minor_gc": "allow_minor",
    "forceMajor": "allow_major",
    "forceMinor": "allow_minor",
}


class _BadRequest(BookieException, ValueError):
    pass


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _BadRequest(f"{key} must be true or false (a JSON boolean or the string), got {value!r}")


def parse_gc_request(body: bytes) -> dict[str, bool]:
    """The `GarbageCollector.trigger` keyword arguments for a ``PUT /api/v1/bookie/gc`` body.

    Raises ``ValueError`` with a reason for a body that is not a JSON object of known keys with
    boolean values. An empty body (or ``null``) means a forced run allowing both compactions.
    """
    args = {"force": True, "allow_major": True, "allow_minor": True}
    if not body.strip():
        return args
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"body is not valid JSON: {exc}") from None
    if doc is None:
        return args
    if not isinstance(doc, dict):
        raise _BadRequest("body must be a JSON object")
    for key, value in doc.items():
        target = _KEYS.get(key)
        if target is None:
            raise _BadRequest(f"unknown key {key!r}; expected one of {sorted(_KEYS)}")
        if value is not None:
            args[target] = _as_bool(key, value)
    return args


def gc_routes(gc: GarbageCollector) -> list[Route]:
    """The routes of the module docstring, bound to ``gc``; mount them in the bookie's app."""

    async def trigger(request: Request) -> Response:
        if request.method == "GET":
            return JSONResponse({"is_in_force_gc": "true" if gc.in_force_gc else "false"})
        try:
            args = parse_gc_request(await request.body())
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        gc.trigger(**args)
        return JSONResponse({"triggered": True, **{k: v for k, v in args.items()}})

    async def details(request: Request) -> Response:
        return JSONResponse([gc.status().to_json()])

    async def explain(request: Request) -> Response:
        q = request.query_params
        try:
            with_md = _as_bool("metadata", q.get("metadata", "true"))
            limit = int(q.get("max_ledgers", "20"))
            if limit < 0:
                raise ValueError
        except ValueError:
            return JSONResponse({"error": "metadata must be true/false and max_ledgers a number >= 0"}, status_code=400)
        result = await gc.explain(lookup_metadata=with_md, max_ledgers_per_log=limit)
        return JSONResponse(result.to_json())

    return [
        Route("/api/v1/bookie/gc", trigger, methods=["GET", "PUT"]),
        Route("/api/v1/bookie/gc_details", details, methods=["GET"]),
        Route("/api/v1/bookie/gc/explain", explain, methods=["GET"]),
    ]
