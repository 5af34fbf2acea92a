"""The FastAPI app: extender verbs, plan, health and metrics.

`create_app(verbs, ...)` takes the decision-maker (the controller's `verbs.Verbs`, or a
stand-in in tests) and optional start/stop hooks run in the lifespan. The verbs read
the body themselves (size limit, one JSON parse in the wire model) so a bad
body is a 400 naming the problem.

kube-scheduler calls filter and prioritize for every GPU pod it schedules, so
those two are answered by a bare ASGI front (`HotPath`) before FastAPI's
routing, middleware and telemetry: on the 2-core machine the p99 of a
filter+prioritize pair went from 3.2-7.6 ms to 2.1-4.9 ms (admitted pod, Go
client). Everything else (bind, plan, metrics, health, the lifespan) is the
FastAPI app behind it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import pydantic_core
from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from extender import metrics
from extender.api import page, wire

log = logging.getLogger(__name__)
JSON = "application/json"


class Verbs(Protocol):
    def filter(self, pod: dict[str, Any],
               nodes: Sequence[str]) -> tuple[list[str], dict[str, str]]: ...

    def verdict(self, pod: dict[str, Any]) -> str | None:
        """A reason every node fails `pod` for (then `filter` would fail them all with
        it), or None when the answer depends on the node."""
        ...

    def prioritize(self, pod: dict[str, Any], nodes: Sequence[str]) -> list[tuple[str, int]]: ...

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> str | None: ...


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _problem(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        where = ".".join(str(x) for x in err.get("loc", ())) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The request body, at most `limit` bytes (413 past it, 400 when empty), or None
    when the client went away before sending it all."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise BadRequest(400, "bad Content-Length") from None
            if declared > limit:
                raise BadRequest(413, f"request body of {declared} bytes exceeds {limit}")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    if not size:
        raise BadRequest(400, "empty request body: expected a JSON object")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _parse(model: type[wire._Wire], raw: bytes) -> Any:
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        if any(err.get("type") == "json_invalid" for err in e.errors()):
            raise BadRequest(400, f"malformed JSON: {_problem(e)}") from None
        raise BadRequest(400, f"not a {model.__name__}: {_problem(e)}") from None


def _pod_of(pod: Any) -> dict[str, Any]:
    if not isinstance(pod, dict):
        raise BadRequest(400, "Pod must be an object")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise BadRequest(400, "Pod.metadata.name is missing")
    if not isinstance(meta.get("namespace", ""), str):
        raise BadRequest(400, "Pod.metadata.namespace must be a string")
    if "spec" in pod and not isinstance(pod["spec"], dict):
        raise BadRequest(400, "Pod.spec must be an object")
    return pod


def _read_args(raw: bytes) -> tuple[dict[str, Any], list[str], bool, bool]:
    """(Pod, candidate node names, whether the scheduler sent full Node objects,
    whether the names came from Go's layout: then they need no JSON escapes)."""
    plain = True
    fast = wire.fast_names(raw)
    if fast is not None:
        pod, names = fast
        full = False
    elif (fast := wire.fast_node_names(raw)) is not None:
        pod, names = fast
        full = True
        metrics.NODELIST_PARSES.labels(path="fast").inc()
    else:
        plain = False
        args = _parse(wire.ExtenderArgsLean, raw)
        pod = args.Pod
        if args.NodeNames is None and args.Nodes is None:
            raise BadRequest(400, "ExtenderArgs needs NodeNames or Nodes")
        full = args.NodeNames is None
        if full:
            metrics.NODELIST_PARSES.labels(path="full").inc()
        found = args.node_names()
        for i, n in enumerate(found):
            if n is None:
                raise BadRequest(400, f"Nodes.items[{i}].metadata.name is missing")
        names = [n for n in found if n is not None]
    return _pod_of(pod), names, full, plain


def _filter_body(raw: bytes, passed: list[str], failed: bytes, full: bool) -> bytes:
    """ExtenderFilterResult as bytes (`failed`: its FailedAndUnresolvableNodes, encoded);
    with full nodes, the passing Node objects verbatim."""
    if not full:
        return b"".join([b'{"Nodes":null,"NodeNames":', pydantic_core.to_json(passed),
                         b',"FailedNodes":{},"FailedAndUnresolvableNodes":', failed,
                         b',"Error":""}'])
    pieces = wire.raw_nodes(raw, passed)
    if pieces is None:  # not Go's layout: parse it all and re-encode the passing nodes
        args = _parse(wire.ExtenderArgs, raw)
        by_name = {wire.node_name(n): n for n in (args.Nodes.items if args.Nodes else [])}
        pieces = [pydantic_core.to_json(by_name[n]) for n in passed]
    return b"".join([b'{"Nodes":{"metadata":{},"items":[', b",".join(pieces),
                     b']},"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":',
                     failed, b',"Error":""}'])


def _all_failed(names: list[str], reason: str) -> bytes:
    """`{name: reason}` for every name, as JSON; the names must need no escapes (Go's
    layout, matched by the fast parsers, guarantees that)."""
    if not names:
        return b"{}"
    why = json.dumps(reason)
    return ('{"' + ('":' + why + ',"').join(names) + '":' + why + "}").encode()


def _json(body: bytes, status: int = 200) -> Response:
    return Response(content=body, status_code=status, media_type=JSON)


def _error(status: int, message: str) -> Response:
    return _json(_problem_body(message), status)


def create_app(verbs: Verbs, *, view: Callable[[], Mapping[str, Any]] = dict,
               ready: Callable[[], bool] = lambda: True,
               healthy: Callable[[], bool] = lambda: True,
               on_start: Callable[[], None] | None = None,
               on_stop: Callable[[], None] | None = None,
               max_body_bytes: int = 64 * 1024 * 1024) -> HotPath:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if on_start is not None:
            await run_in_threadpool(on_start)
        try:
            yield
        finally:
            if on_stop is not None:
                await run_in_threadpool(on_stop)

    app = FastAPI(title="gpuroster", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)

    def timed(verb: str, started: float, outcome: str) -> None:
        metrics.EXTENDER_REQUEST_DURATION.labels(verb=verb, outcome=outcome).observe(
            time.perf_counter() - started)

    @app.post("/bind")
    async def bind(request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            raw = await read_body(request.scope, request.receive, max_body_bytes)
            if raw is None:
                raise BadRequest(400, "the client went away before sending its body")
            args = _parse(wire.ExtenderBindingArgs, raw)
            if not (args.PodName and args.PodNamespace and args.Node):
                raise BadRequest(400, "PodName, PodNamespace and Node must not be empty")
        except BadRequest as e:
            timed("bind", t0, "bad_request")
            return _error(e.status, e.message)
        try:
            error = await run_in_threadpool(verbs.bind, args.PodNamespace, args.PodName,
                                            args.PodUID or None, args.Node)
        except Exception:
            # Answered by `unexpected` (a JSON 500), but timed here: a failing bind is
            # the call whose duration matters most.
            timed("bind", t0, "error")
            raise
        timed("bind", t0, "error" if error else "bound")
        return _json(wire.ExtenderBindingResult(Error=error or "").model_dump_json().encode())

    @app.get("/plan")
    async def plan() -> Response:
        return JSONResponse(dict(view()))

    @app.get("/plan/view")
    async def plan_view() -> Response:
        return HTMLResponse(page.render(view()))

    @app.get("/metrics")
    async def metrics_() -> Response:
        return Response(content=metrics.exposition(), media_type=metrics.CONTENT_TYPE)

    @app.get("/healthz")
    async def healthz() -> Response:
        ok = healthy()
        return Response(content=b"ok" if ok else b"unhealthy", status_code=200 if ok else 503,
                        media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        ok = ready()
        return Response(content=b"ok" if ok else b"not ready", status_code=200 if ok else 503,
                        media_type="text/plain")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        # Never a bare 500 with a stack: the scheduler logs the Error text.
        log.exception("unexpected error on %s", request.url.path)
        return _error(500, f"internal error: {type(exc).__name__}")

    return HotPath(app, verbs, max_body_bytes)


# --- the hot path -------------------------------------------------------------------------

def _filter(verbs: Verbs, raw: bytes) -> tuple[bytes, str]:
    pod, names, full, plain = _read_args(raw)
    if plain and (reason := verbs.verdict(pod)) is not None:
        # A waiting pod: one reason for every node, written without a dict of them.
        return _filter_body(raw, [], _all_failed(names, reason), full), "reject"
    passed, failed = verbs.filter(pod, names)
    return (_filter_body(raw, passed, pydantic_core.to_json(failed), full),
            "pass" if passed else "reject")


def _prioritize(verbs: Verbs, raw: bytes) -> tuple[bytes, str]:
    pod, names, _, _ = _read_args(raw)
    scores = verbs.prioritize(pod, names)
    # kube-scheduler adds Score x weight per listed host; a host left out adds 0,
    # so zero scores are not sent (a 1,000-node answer shrinks to a line).
    top = wire.MAX_EXTENDER_PRIORITY
    out = [{"Host": h, "Score": top if s >= top else s} for h, s in scores if s > 0]
    return pydantic_core.to_json(out), "ok"


_HOT: dict[str, tuple[str, Callable[[Verbs, bytes], tuple[bytes, str]]]] = {
    "/filter": ("filter", _filter), "/prioritize": ("prioritize", _prioritize)}


class HotPath:
    """ASGI app: POST /filter and /prioritize answered directly, the rest by `app`.

    Same contract as a FastAPI route would give: a 413 past the body limit, a 400
    naming the problem for a bad body, a 405 for another method, a JSON `Error`
    (never a stack) if a verb raises.
    """

    def __init__(self, app: FastAPI, verbs: Verbs, max_body_bytes: int) -> None:
        self.app = app
        self.verbs = verbs
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = _HOT.get(scope.get("path", "")) if scope["type"] == "http" else None
        if hot is None:
            await self.app(scope, receive, send)
            return
        verb, answer = hot
        t0 = time.perf_counter()
        if scope["method"] != "POST":
            status, body, outcome = 405, _problem_body(f"{scope['method']} not allowed: "
                                                       "use POST"), "bad_request"
        else:
            try:
                raw = await read_body(scope, receive, self.limit)
                if raw is None:
                    return  # the client went away: nobody to answer
                body, outcome = answer(self.verbs, raw)
                status = 200
            except BadRequest as e:
                status, body, outcome = e.status, _problem_body(e.message), "bad_request"
            except Exception as e:  # noqa: BLE001 - never a bare 500: the scheduler logs Error
                log.exception("unexpected error on %s", scope["path"])
                status, body, outcome = 500, _problem_body(
                    f"internal error: {type(e).__name__}"), "error"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        metrics.EXTENDER_REQUEST_DURATION.labels(verb=verb, outcome=outcome).observe(
            time.perf_counter() - t0)


def _problem_body(message: str) -> bytes:
    return json.dumps({"Error": message}).encode()
