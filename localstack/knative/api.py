"""The Kubernetes REST API for ``serving.knative.dev/v1`` Services, on loopback.

The paths, verbs and bodies are those the official ``kubernetes`` client and ``kubectl``
use: discovery, list (one namespace or all, ``?watch=true`` for a stream of events), get,
create, replace, patch (JSON merge patch; a strategic merge patch is one for a custom
resource, as the API server treats it; server-side apply as a merge of the applied
configuration) and delete. Every error is a ``Status`` object.
``ApiServer`` runs the app with uvicorn over HTTPS in a background thread, behind the
``Door`` (``door.py``: the kubeconfig's token, no browsers, a body limit); bodies are read
by ``bodies.py`` (the Kubernetes API's content types, YAML with an alias budget); what the
server says about itself is ``discovery.py``, and list and watch select with
``selector.py``.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any

import orjson
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from modelfn.localstack.knative.bodies import (
    APPLY_PATCH,
    DELETES,
    JSON_PATCH,
    PATCHES,
    WRITES,
    content_type,
    read,
    read_object,
)
from modelfn.localstack.knative.discovery import documents
from modelfn.localstack.knative.door import Door
from modelfn.localstack.knative.errors import (
    ApiError,
    Gone,
    MalformedRequest,
    MethodNotAllowed,
    PathNotFound,
)
from modelfn.localstack.knative.patches import json_patch
from modelfn.localstack.knative.selector import matcher
from modelfn.localstack.knative.table import table
from modelfn.localstack.knative.tls import Certificate
from modelfn.localstack.state import CONTEXT, write_private
from modelfn.platforms import knative as kn
from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    import socket
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from starlette.requests import Request

    from modelfn.localstack.knative.store import Event, ServiceStore

HOST = "127.0.0.1"
#: a watch with no ``timeoutSeconds`` ends after this long (the API server picks 30-60 min)
WATCH_TIMEOUT_S = 1800.0


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _error(exc: ApiError) -> Response:
    return _json(exc.status(), exc.status_code)


class KnativeApi:
    """The ASGI app over a ``ServiceStore``; ``close_watches()`` ends every open watch."""

    def __init__(self, store: ServiceStore) -> None:
        self.store = store
        self._watches: set[Callable[[], None]] = set()
        base = f"/apis/{kn.API_VERSION}"
        routes = [Route(path, self._static(body)) for path, body in documents(HOST).items()]
        routes += [
            Route(f"{base}/{kn.PLURAL}", self.collection, methods=["GET"]),
            Route(f"{base}/namespaces/{{namespace}}/{kn.PLURAL}", self.collection,
                  methods=["GET", "POST"]),
            Route(f"{base}/namespaces/{{namespace}}/{kn.PLURAL}/{{name}}", self.item,
                  methods=["GET", "PUT", "PATCH", "DELETE"]),
            Route(f"{base}/namespaces/{{namespace}}/{kn.PLURAL}/{{name}}/status", self.item,
                  methods=["GET"]),
        ]
        self.app = Starlette(routes=routes, exception_handlers={
            ApiError: self._api_error, 404: self._not_found, 405: self._not_allowed,
            Exception: self._internal})

    # -- errors, always Status ---------------------------------------------------------

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error(exc)

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return _error(PathNotFound(request.url.path))

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return _error(MethodNotAllowed(f"{request.method} is not allowed on "
                                       f"{request.url.path}"))

    async def _internal(self, request: Request, exc: Exception) -> Response:
        return _error(ApiError(f"internal error: {type(exc).__name__}: {exc}"))

    @staticmethod
    def _static(body: dict[str, Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return _json(body)

        return endpoint

    # -- the resource ------------------------------------------------------------------

    async def collection(self, request: Request) -> Response:
        namespace = request.path_params.get("namespace")
        if request.method == "POST":
            created = self.store.create(str(namespace), await read_object(request, WRITES),
                                        strict=_strict(request))
            return _json(created, 201)
        params = request.query_params
        match = matcher(params.get("fieldSelector", ""), params.get("labelSelector", ""))
        if params.get("watch", "").lower() in ("true", "1"):
            return self._watch(request, namespace, match)
        items, version = self.store.list(namespace)
        items = [o for o in items if match(o)]
        if "as=Table" in request.headers.get("accept", ""):
            return _json(table(items, version,
                               include_object=params.get("includeObject") == "Object"))
        return _json({"kind": f"{kn.KIND}List", "apiVersion": kn.API_VERSION,
                      "metadata": {"resourceVersion": version}, "items": items})

    async def item(self, request: Request) -> Response:
        namespace = str(request.path_params["namespace"])
        name = str(request.path_params["name"])
        if request.method == "GET":
            obj = self.store.get(namespace, name)
            if "as=Table" in request.headers.get("accept", ""):
                return _json(table([obj], obj["metadata"]["resourceVersion"]))
            return _json(obj)
        if request.method == "PUT":
            return _json(self.store.replace(namespace, name,
                                            await read_object(request, WRITES),
                                            strict=_strict(request)))
        if request.method == "PATCH":
            return await self._patch(request, namespace, name)
        _strict(request)  # a dry run deletes nothing here either
        uid, resource_version = await _preconditions(request)
        deleted = self.store.delete(namespace, name, uid=uid,
                                    resource_version=resource_version)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Success",
                      "details": {"name": name, "group": kn.GROUP, "kind": kn.PLURAL,
                                  "uid": deleted["metadata"]["uid"]}})

    async def _patch(self, request: Request, namespace: str, name: str) -> Response:
        strict = _strict(request)
        kind = content_type(request)
        if kind == JSON_PATCH:
            operations = await read(request, PATCHES)
            return _json(self.store.patch(namespace, name, operations, strict=strict,
                                          apply=json_patch))
        patch = await read_object(request, PATCHES)
        if kind == APPLY_PATCH:
            if self.store.find(namespace, name) is None:
                return _json(self.store.create(namespace, patch, strict=strict), 201)
        return _json(self.store.patch(namespace, name, patch, strict=strict))

    # -- watch ---------------------------------------------------------------------------

    def _watch(self, request: Request, namespace: str | None,
               match: Callable[[dict[str, Any]], bool]) -> Response:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        since = _resource_version(request.query_params.get("resourceVersion", ""))
        timeout = _timeout(request.query_params.get("timeoutSeconds", ""))

        def push(event: Event | None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the server's loop is gone: this watch is over
                pass

        def end() -> None:
            push(None)

        try:
            unsubscribe = self.store.subscribe(push, since=since, initial=since is None)
        except Gone as exc:  # as the API server: an ERROR event in the stream, not a 410
            error = orjson.dumps({"type": "ERROR", "object": exc.status()}) + b"\n"
            return Response(error, media_type="application/json")
        self._watches.add(end)
        as_table = "as=Table" in request.headers.get("accept", "")
        include = request.query_params.get("includeObject") == "Object"

        def render(event: Event) -> dict[str, Any]:  # kubectl get -w asks for table rows
            if not as_table:
                return event.object
            return table([event.object], str(event.resource_version), include_object=include)

        async def stream() -> AsyncIterator[bytes]:
            deadline = loop.time() + timeout
            try:
                while (left := deadline - loop.time()) > 0:
                    try:
                        event = await asyncio.wait_for(queue.get(), left)
                    except TimeoutError:
                        return
                    if event is None:
                        return
                    ns, _ = event.key
                    if (namespace is None or ns == namespace) and match(event.object):
                        yield orjson.dumps({"type": event.type, "object": render(event)}) + b"\n"
            finally:
                unsubscribe()
                self._watches.discard(end)

        return StreamingResponse(stream(), media_type="application/json")

    def close_watches(self) -> None:
        for end in list(self._watches):
            end()


def _strict(request: Request) -> bool:
    """Whether undeclared fields are refused; a server-side dry run is refused outright
    (the local platform cannot promise a write it does not make)."""
    if request.query_params.get("dryRun"):
        raise MalformedRequest("the local Knative API does not support dryRun; leave it out")
    return request.query_params.get("fieldValidation", "") == "Strict"


def _resource_version(value: str) -> int | None:
    """A watch's ``resourceVersion``: None to start from now ("" or "0"), else the
    version after which events are wanted."""
    if value in ("", "0"):
        return None
    if not value.isdigit() or not value.isascii():
        raise MalformedRequest(f"invalid resource version {value!r}: it must be a non-negative "
                               "integer, as a list or an object gave it")
    return int(value)


def _timeout(value: str) -> float:
    """A watch's ``timeoutSeconds``: a non-negative integer, 0 or none for the default."""
    if value == "":
        return WATCH_TIMEOUT_S
    if not value.isdigit() or not value.isascii():
        raise MalformedRequest(f"invalid timeoutSeconds {value!r}: it must be a non-negative "
                               "integer")
    return float(value) or WATCH_TIMEOUT_S


async def _preconditions(request: Request) -> tuple[str | None, str | None]:
    """The ``uid`` and ``resourceVersion`` preconditions of a delete's DeleteOptions (its
    body, if it has one); a dry run in them is refused as in the query."""
    if not await request.body():
        return None, None
    options = await read_object(request, DELETES)
    if options.get("dryRun"):
        raise MalformedRequest("the local Knative API does not support dryRun; leave it out")
    preconditions = options.get("preconditions") or {}
    if not isinstance(preconditions, dict):
        raise MalformedRequest("DeleteOptions.preconditions must be an object with uid and "
                               "resourceVersion")
    found = (preconditions.get("uid"), preconditions.get("resourceVersion"))
    if any(value is not None and not isinstance(value, str) for value in found):
        raise MalformedRequest("DeleteOptions.preconditions.uid and .resourceVersion must be "
                               "strings")
    return found


class _Server(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Drop idle connections at once: over TLS a plain close waits for the client's
        close_notify, which a client idling in a connection pool never sends."""
        for connection in list(self.server_state.connections):
            cycle = getattr(connection, "cycle", None)
            if cycle is None or cycle.response_complete:
                connection.transport.abort()
        await super().shutdown(sockets)


class ApiServer:
    """``KnativeApi`` served by uvicorn over HTTPS on ``127.0.0.1`` in a background thread,
    behind the ``Door`` that asks every request for ``token``. ``write_kubeconfig(path)``
    gives clients the URL, the token and the certificate to trust."""

    def __init__(self, store: ServiceStore, *, port: int = 0, token: str | None = None
                 ) -> None:
        self.api = KnativeApi(store)
        #: the bearer token every request must carry (a fresh secret unless given)
        self.token = token or secrets.token_urlsafe(32)
        self.certificate = Certificate.make()
        self.port = port or free_port(HOST)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def start(self) -> ApiServer:
        certfile, keyfile = self.certificate.files()
        try:
            config = uvicorn.Config(Door(self.api.app, self.token), host=HOST, port=self.port,
                                    ssl_certfile=certfile, ssl_keyfile=keyfile,
                                    log_level="warning", access_log=False, lifespan="off",
                                    timeout_graceful_shutdown=2)
            self._server = server = _Server(config)
            self._thread = threading.Thread(target=server.run, name="knative-api",
                                            daemon=True)
            self._thread.start()
            while not server.started:
                if not self._thread.is_alive():
                    raise RuntimeError(f"the Knative API could not listen on {self.url}")
                time.sleep(0.01)
        finally:
            self.certificate.remove()  # loaded by now: the key stays in memory only
        return self

    def write_kubeconfig(self, path: Path, context: str = CONTEXT,
                         namespace: str = "default") -> None:
        """A kubeconfig that reaches this server (see ``write_kubeconfig``)."""
        write_kubeconfig(path, self.url, self.token, self.certificate.authority_data,
                         context=context, namespace=namespace)

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self.api.close_watches()
        self._server.should_exit = True
        self._thread.join()
        self._server = self._thread = None


def write_kubeconfig(path: Path, server_url: str, token: str, authority_data: str, *,
                     context: str = CONTEXT, namespace: str = "default") -> None:
    """A kubeconfig whose ``context`` (the current one) reaches ``server_url`` with
    ``token``, trusting the certificate ``authority_data`` (base64 PEM); only its owner
    may read it (mode 0600)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": context, "cluster": {
            "server": server_url, "certificate-authority-data": authority_data}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context,
                                                   "namespace": namespace}}],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
