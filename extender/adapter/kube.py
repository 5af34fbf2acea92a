"""The Kubernetes client behind one small protocol (the only module importing `kubernetes`).

Objects travel as plain dicts (their JSON): lists and watches are read with
`_preload_content=False`, so no generated model classes are built on the
hot path and the cache, the fake and the snapshot all speak the same shape.
Every failure surfaces as `ApiError` with the HTTP status (0: no answer).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any, Protocol

log = logging.getLogger(__name__)

KINDS = ("nodes", "pods", "deployments", "configmaps", "priorityclasses", "resourceslices",
         "resourceclaims")
NAMESPACED = {"pods", "deployments", "configmaps", "resourceclaims"}
# The field manager of the claim allocations gpuroster writes (DRA mode).
FIELD_MANAGER = "gpuroster"
MERGE = "application/merge-patch+json"
# Pod conditions merge by type only under a strategic merge patch.
STRATEGIC = "application/strategic-merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class Kube(Protocol):
    def list(self, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              timeout_seconds: int) -> Iterator[dict[str, Any]]: ...

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> None: ...

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...

    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...

    def scale(self, namespace: str, name: str, replicas: int) -> None: ...

    def evict(self, namespace: str, name: str) -> None: ...

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_claim_status(self, namespace: str, name: str,
                           patch: dict[str, Any]) -> dict[str, Any]: ...

    def patch_claim(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class Client:
    """`Kube` over the official client. `kubeconfig` empty: in-cluster config."""

    def __init__(self, kubeconfig: str = "", qps_timeout: float = 10.0) -> None:
        from kubernetes import client, config

        if kubeconfig:
            self.api: Any = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig)
        else:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            self.api = client.ApiClient()
        # Bodies go in as dicts and come back as raw JSON: skip the generated model types.
        self.core: Any = client.CoreV1Api(self.api)
        self.apps: Any = client.AppsV1Api(self.api)
        self.scheduling: Any = client.SchedulingV1Api(self.api)
        self.resource: Any = client.ResourceV1Api(self.api)
        self.timeout = qps_timeout

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing is best effort
            self.api.close()

    # --- read -------------------------------------------------------------------

    def _lister(self, kind: str, namespace: str | None) -> Any:
        if kind == "nodes":
            return self.core.list_node, {}
        if kind == "priorityclasses":
            return self.scheduling.list_priority_class, {}
        if kind == "resourceslices":
            return self.resource.list_resource_slice, {}
        if kind not in NAMESPACED:
            raise ValueError(f"unknown kind {kind!r}")
        api = {"deployments": self.apps, "resourceclaims": self.resource}.get(kind, self.core)
        singular = {"pods": "pod", "deployments": "deployment", "configmaps": "config_map",
                    "resourceclaims": "resource_claim"}[kind]
        if namespace:
            return getattr(api, f"list_namespaced_{singular}"), {"namespace": namespace}
        return getattr(api, f"list_{singular}_for_all_namespaces"), {}

    def list(self, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        fn, kw = self._lister(kind, namespace)
        with _errors():
            resp = fn(_preload_content=False, _request_timeout=60, **kw)
            doc = json.loads(resp.data)
        return list(doc.get("items") or []), str((doc.get("metadata") or {})
                                                 .get("resourceVersion", ""))

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              timeout_seconds: int) -> Iterator[dict[str, Any]]:
        from kubernetes.watch.watch import iter_resp_lines

        fn, kw = self._lister(kind, namespace)
        with _errors():
            resp = fn(watch=True, resource_version=resource_version,
                      allow_watch_bookmarks=True, timeout_seconds=timeout_seconds,
                      _preload_content=False, _request_timeout=(10, timeout_seconds + 15), **kw)
        try:
            with _errors():
                for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                    if line:
                        yield json.loads(line)
        finally:
            resp.close()
            resp.release_conn()

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        with _errors():
            try:
                resp = self.core.read_namespaced_config_map(name, namespace,
                                                            _preload_content=False)
            except Exception as e:
                if getattr(e, "status", None) == 404:
                    return None
                raise
            doc: dict[str, Any] = json.loads(resp.data)
            return doc

    # --- write ------------------------------------------------------------------

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if uid:
            body["metadata"]["uid"] = uid
        with _errors():
            # pods/binding, as kube-scheduler binds (the chart grants only that
            # subresource, not the top-level `bindings`). The generated client fails
            # to decode a Binding answer; skip decoding.
            self.core.create_namespaced_pod_binding(name, namespace, body,
                                                    _preload_content=False,
                                                    _request_timeout=self.timeout)

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        with _errors():
            resp = self.core.patch_namespaced_pod(name, namespace, patch, _preload_content=False,
                                                  _content_type=MERGE,
                                                  _request_timeout=self.timeout)
            doc: dict[str, Any] = json.loads(resp.data)
            return doc

    def patch_claim_status(self, namespace: str, name: str,
                           patch: dict[str, Any]) -> dict[str, Any]:
        with _errors():
            resp = self.resource.patch_namespaced_resource_claim_status(
                name, namespace, patch, _preload_content=False, _content_type=MERGE,
                field_manager=FIELD_MANAGER, _request_timeout=self.timeout)
            doc: dict[str, Any] = json.loads(resp.data)
            return doc

    def patch_claim(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        with _errors():
            resp = self.resource.patch_namespaced_resource_claim(
                name, namespace, patch, _preload_content=False, _content_type=MERGE,
                field_manager=FIELD_MANAGER, _request_timeout=self.timeout)
            doc: dict[str, Any] = json.loads(resp.data)
            return doc

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        with _errors():
            self.core.patch_namespaced_pod_status(name, namespace, patch,
                                                  _preload_content=False,
                                                  _content_type=STRATEGIC,
                                                  _request_timeout=self.timeout)

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        with _errors():
            self.core.create_namespaced_event(namespace, body, _preload_content=False,
                                              _request_timeout=self.timeout)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        with _errors():
            self.apps.patch_namespaced_deployment_scale(
                name, namespace, {"spec": {"replicas": replicas}}, _preload_content=False,
                _content_type=MERGE,
                _request_timeout=self.timeout)

    def evict(self, namespace: str, name: str) -> None:
        """The Eviction API, not a delete: a PodDisruptionBudget can refuse it (429)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        with _errors():
            self.core.create_namespaced_pod_eviction(name, namespace, body,
                                                     _preload_content=False,
                                                     _request_timeout=self.timeout)


class _errors:
    """Translate client and transport exceptions into ApiError."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
        if exc is None or isinstance(exc, ApiError | GeneratorExit):
            return
        from kubernetes.client.exceptions import ApiException

        if isinstance(exc, ApiException):
            message = exc.reason or ""
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(exc.body or "{}").get("message") or message
            raise ApiError(int(exc.status or 0), str(message)) from exc
        if isinstance(exc, OSError | ValueError) or type(exc).__module__.startswith("urllib3"):
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc


class ReadOnly:
    """A `Kube` that reads through `inner` and refuses every write (shadow mode).

    The controller makes no write in shadow mode; this is the guard that proves
    it: a write that gets here raises `ApiError` and calls `on_write(verb)` (a
    counter that must stay at zero) instead of reaching the API server."""

    def __init__(self, inner: Kube, on_write: Any = None) -> None:
        self.inner = inner
        self.on_write = on_write

    def _refuse(self, verb: str, what: str) -> ApiError:
        if self.on_write is not None:
            self.on_write(verb)
        log.error("shadow mode: refused to %s %s (a write reached the client)", verb, what)
        return ApiError(0, f"shadow mode: {verb} of {what} not sent")

    def list(self, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        return self.inner.list(kind, namespace)

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              timeout_seconds: int) -> Iterator[dict[str, Any]]:
        return self.inner.watch(kind, namespace, resource_version, timeout_seconds)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.inner.get_configmap(namespace, name)

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> None:
        raise self._refuse("bind", f"pod {namespace}/{name}")

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        raise self._refuse("patch", f"pod {namespace}/{name}")

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        raise self._refuse("patch_status", f"pod {namespace}/{name}")

    def patch_claim_status(self, namespace: str, name: str,
                           patch: dict[str, Any]) -> dict[str, Any]:
        raise self._refuse("patch_status", f"resourceclaim {namespace}/{name}")

    def patch_claim(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        raise self._refuse("patch", f"resourceclaim {namespace}/{name}")

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        raise self._refuse("create_event", f"an Event in {namespace}")

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        raise self._refuse("scale", f"deployment {namespace}/{name}")

    def evict(self, namespace: str, name: str) -> None:
        raise self._refuse("evict", f"pod {namespace}/{name}")
