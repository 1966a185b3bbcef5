"""The local serving plane: revisions' instances, their routes' URLs, and the data path.

``LocalServingPlane`` runs one asyncio loop (uvloop when installed) in a background
thread, like the S3 emulator runs moto in one. The reconciler calls the ``ServingPlane``
methods from its own thread; each runs on the loop and returns when it is done there.
Each Service URL and each tag URL is its own loopback listener
(``http://127.0.0.1:PORT``), stable for the Service's life, so no DNS setup is needed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from modelfn.localstack.plane import RevisionSpec, RevisionStatus, RouteSpec, RouteUrls
from modelfn.localstack.serving.activator import RevisionUnavailable
from modelfn.localstack.serving.capacity import InstanceCap, default_limit
from modelfn.localstack.serving.http import (
    MAX_HEAD_BYTES,
    BadGateway,
    error_response,
    json_response,
    serve_connection,
)
from modelfn.localstack.serving.instance import DRAIN_GRACE_S, HOST, CpuSets
from modelfn.localstack.serving.revision import Revision
from modelfn.platforms.podman import Podman, Storage
from modelfn.platforms.traffic import WeightedPicker
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping
    from pathlib import Path

    from modelfn.localstack.serving.grpc import GrpcIngress
    from modelfn.net.grpc_relay import Metadata
    from modelfn.net.http1 import Head

log = logging.getLogger("modelfn.serving")
T = TypeVar("T")

#: the activator's queue per revision (Knative's activator buffers up to 10000 per revision)
DEFAULT_QUEUE_SIZE = 10_000
#: seconds of in-flight samples the autoscaler averages
DEFAULT_WINDOW_S = 2.0
#: seconds a sync call waits for the loop (stopping a revision drains its instances)
CALL_TIMEOUT_S = 120.0


_STOPPING = "the local platform is stopping: it takes no new requests"
_STOPPED = "the local platform stopped the function before it answered"


class RevisionNotFound(ModelfnError):
    status_code = 404

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"revision {namespace}/{name} is not known to the serving plane")


class PlatformStopping(ModelfnError):
    """A request that arrived while the platform drains."""

    status_code = 503

    def __init__(self) -> None:
        super().__init__(_STOPPING)


@dataclass(eq=False)
class _Listener:
    """One loopback URL: its server, the client connections it has open, and its gRPC
    relay once an h2c connection came (``grpc.GrpcIngress``)."""

    server: asyncio.Server
    connections: set[asyncio.StreamWriter] = field(default_factory=set)
    grpc: GrpcIngress | None = None
    grpc_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def url(self) -> str:
        port = self.server.sockets[0].getsockname()[1]
        return f"http://{HOST}:{port}"

    async def close(self) -> None:
        self.server.close()
        if self.grpc is not None:
            await self.grpc.close()
        for writer in list(self.connections):
            writer.close()
        await self.server.wait_closed()


@dataclass(eq=False)
class _Route:
    spec: RouteSpec
    main: _Listener
    tags: dict[str, _Listener] = field(default_factory=dict)
    tagged: dict[str, str] = field(default_factory=dict)  # tag -> revision
    #: the split: a revision for an unpinned request, weighted random by percent
    split: WeightedPicker[str] = field(default_factory=lambda: WeightedPicker(()))

    def set_split(self, spec: RouteSpec) -> None:
        self.spec = spec
        self.split = WeightedPicker((t.revision, t.percent) for t in spec.traffic)
        self.tagged = {t.tag: t.revision for t in spec.traffic if t.tag}


class LocalServingPlane:
    """The ``ServingPlane`` of the local platform: ``with LocalServingPlane() as plane: ...``.

    ``idle_s`` overrides every revision's idle window (``modelfn dev --idle``);
    ``containers`` runs revisions' images with podman on ``storage`` (by default the
    one ``modelfn build`` uses: ``MODELFN_STORAGE_ROOT``, ``MODELFN_STORAGE_DRIVER``);
    ``queue_size`` and ``queue_timeout_s`` bound the activator's queue per revision
    (the timeout defaults to the revision's ``timeout_s``); ``max_instances`` caps the
    instances running at once over all revisions (default: usable CPUs x 2, at least 4);
    ``log_dir`` keeps each instance's output in ``<instance>.log``; ``tmp_dir`` (emptied at
    start) holds each process instance's ``TMPDIR``; ``env`` is given to
    every instance under the revision's own (the platform's endpoints:
    ``AWS_ENDPOINT_URL``, credentials). A process
    instance inherits this machine's environment minus ``MODELFN_*``, ``K_*`` and ``PORT``.

    ``stop()`` drains: new requests get a 503 at once, nothing scales any more, and the
    requests in flight get up to ``drain_s`` seconds to be answered (``hurry()`` ends the
    wait at once); then the instances are stopped, and a request still waiting for its
    instance's answer gets a 503 saying so. None is dropped without an answer.
    """

    def __init__(self, *, idle_s: float | None = None, containers: bool = False,
                 storage: Storage | None = None, queue_size: int = DEFAULT_QUEUE_SIZE,
                 queue_timeout_s: float | None = None, max_instances: int | None = None,
                 window_s: float = DEFAULT_WINDOW_S, log_dir: Path | None = None,
                 env: Mapping[str, str] | None = None, drain_s: float = DRAIN_GRACE_S,
                 tmp_dir: Path | None = None) -> None:
        self.idle_s = idle_s
        self.tmp_dir = tmp_dir
        self.drain_s = drain_s
        self._draining = False
        self._busy = 0  # requests (and gRPC calls) on the data path now
        self._serving: set[asyncio.StreamWriter] = set()  # connections inside a request
        self._quiet: asyncio.Event | None = None  # set when draining and nothing is busy
        self._hurry: asyncio.Event | None = None  # set by hurry(): stop waiting now
        self.containers = containers
        self._podman = (Podman(storage or Storage.from_env()) if containers else None)
        self.queue_size = queue_size
        self.queue_timeout_s = queue_timeout_s
        self._cpusets = CpuSets()
        self.max_instances = max_instances or default_limit(len(self._cpusets.usable))
        self._cap = InstanceCap(self.max_instances)
        self.window_s = window_s
        self.log_dir = log_dir
        self.env = dict(env or {})
        self._revisions: dict[tuple[str, str], Revision] = {}
        self._routes: dict[tuple[str, str], _Route] = {}
        self._callbacks: list[Callable[[str, str], None]] = []
        self._notify = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="plane-notify")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._status: _Listener | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> LocalServingPlane:
        if self._thread is not None:
            raise RuntimeError("the serving plane is already running")
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.tmp_dir is not None:  # what a platform killed with SIGKILL left behind
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            self.tmp_dir.mkdir(parents=True)
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="serving-plane",
                                        daemon=True)
        self._thread.start()
        self._status = self._call(self._listen(self._serve_status))
        return self

    def stop(self) -> None:
        """Drain and stop every instance, close every URL, stop the loop."""
        if self._loop is None or self._thread is None:
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._loop = self._thread = None
        self._notify.shutdown(wait=True)

    def __enter__(self) -> LocalServingPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def hurry(self) -> None:
        """Stop draining now (a second Ctrl-C): requests still in flight get a 503."""
        loop, hurry = self._loop, self._hurry
        if loop is not None and hurry is not None:
            loop.call_soon_threadsafe(hurry.set)

    async def _shutdown(self) -> None:
        self._quiet, self._hurry = asyncio.Event(), asyncio.Event()
        self._draining = True
        await asyncio.gather(*(r.stop_scaling() for r in self._revisions.values()))
        listeners = [listener for route in self._routes.values()
                     for listener in (route.main, *route.tags.values())]
        for listener in listeners:
            listener.server.close()  # no new connections
            for writer in listener.connections - self._serving:
                writer.close()  # idle keep-alive connections
        if self._busy:
            until = time.time() + self.drain_s
            log.info("draining: waiting for %d request(s) in flight until %s (%g s); "
                     "Ctrl-C again stops at once", self._busy,
                     time.strftime("%H:%M:%S", time.localtime(until)), self.drain_s)
            waits = [asyncio.ensure_future(event.wait()) for event in (self._quiet, self._hurry)]
            done, pending = await asyncio.wait(waits, timeout=self.drain_s,
                                               return_when=asyncio.FIRST_COMPLETED)
            for wait in pending:
                wait.cancel()
        late = self._busy
        if late:
            log.warning("draining: %d request(s) still in flight %s; they get a 503",
                        late, "after a second Ctrl-C" if self._hurry.is_set()
                        else f"after {self.drain_s:g} s")
        # instances stop now; with requests still in flight, at once (they are answered
        # 503 when their instance's connection ends, before the URLs close)
        await asyncio.gather(*(r.close(grace=0 if late else None)
                               for r in self._revisions.values()))
        if self._busy:
            await asyncio.wait([asyncio.ensure_future(self._quiet.wait())], timeout=5)
        for route in self._routes.values():
            await route.main.close()
            for listener in route.tags.values():
                await listener.close()
        self._routes.clear()
        self._revisions.clear()
        if self._status is not None:
            await self._status.close()

    def _enter(self, writer: asyncio.StreamWriter | None) -> None:
        self._busy += 1
        if writer is not None:
            self._serving.add(writer)

    def _leave(self, writer: asyncio.StreamWriter | None) -> None:
        self._busy -= 1
        if writer is not None:
            self._serving.discard(writer)
        if self._draining and not self._busy and self._quiet is not None:
            self._quiet.set()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coro.close()
            raise RuntimeError("the serving plane is not running; call start() first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT_S)

    # -- the ServingPlane protocol (sync, from any thread) -----------------------------

    def ensure_revision(self, spec: RevisionSpec) -> None:
        self._call(self._ensure(spec))

    def remove_revision(self, namespace: str, name: str) -> None:
        self._call(self._remove(namespace, name))

    def set_route(self, route: RouteSpec) -> RouteUrls:
        return self._call(self._set_route(route))

    def remove_route(self, namespace: str, service: str) -> None:
        self._call(self._remove_route(namespace, service))

    def revision_status(self, namespace: str, name: str) -> RevisionStatus:
        return self._call(self._revision_status(namespace, name))

    def on_change(self, callback: Callable[[str, str], None]) -> None:
        self._callbacks.append(callback)

    def status(self) -> dict[str, Any]:
        """Revisions (instances, in flight, cold starts, requests, hold times) and routes."""
        return self._call(self._describe())

    @property
    def status_url(self) -> str:
        """``GET`` it for ``status()`` as JSON (what ``modelfn dev status`` shows)."""
        if self._status is None:
            raise RuntimeError("the serving plane is not running; call start() first")
        return self._status.url

    def hold_times(self, namespace: str, name: str) -> list[float]:
        """Seconds each scale from zero of the revision held its first request."""
        return list(self._call(self._get(namespace, name)).activator.holds_s)

    def pids(self, namespace: str, name: str) -> list[int]:
        """Process ids of the revision's running instances."""
        return self._call(self._get(namespace, name)).pids()

    # -- on the loop -------------------------------------------------------------------

    async def _get(self, namespace: str, name: str) -> Revision:
        revision = self._revisions.get((namespace, name))
        if revision is None:
            raise RevisionNotFound(namespace, name)
        return revision

    async def _ensure(self, spec: RevisionSpec) -> None:
        key = (spec.namespace, spec.name)
        known = self._revisions.get(key)
        if known is not None:
            if known.spec == spec:
                return
            await self._remove(spec.namespace, spec.name)  # revisions are immutable: replace
        idle_s = spec.idle_s if self.idle_s is None else self.idle_s
        revision = Revision(
            spec, idle_s=idle_s, window_s=min(self.window_s, idle_s) or self.window_s,
            cap=self._cap, queue_size=self.queue_size,
            queue_timeout_s=self.queue_timeout_s, cpusets=self._cpusets, podman=self._podman,
            log_dir=self.log_dir, base_env=self.env, changed=self._changed,
            tmp_root=self.tmp_dir)
        self._revisions[key] = revision
        revision.start()

    async def _remove(self, namespace: str, name: str) -> None:
        revision = self._revisions.pop((namespace, name), None)
        if revision is not None:
            await revision.close()

    async def _revision_status(self, namespace: str, name: str) -> RevisionStatus:
        return (await self._get(namespace, name)).status()

    def _changed(self, revision: Revision) -> None:
        for callback in self._callbacks:
            self._notify.submit(self._safely, callback, revision.spec.namespace,
                                revision.spec.name)

    @staticmethod
    def _safely(callback: Callable[[str, str], None], namespace: str, name: str) -> None:
        try:
            callback(namespace, name)
        except Exception:
            log.exception("on_change callback failed for %s/%s", namespace, name)

    async def _set_route(self, spec: RouteSpec) -> RouteUrls:
        key = (spec.namespace, spec.service)
        route = self._routes.get(key)
        if route is None:
            main = await self._listen(functools.partial(self._serve_route, key, None),
                                      (key, None))
            route = self._routes[key] = _Route(spec, main)
        route.set_split(spec)
        for tag in list(route.tags):
            if tag not in route.tagged:
                await route.tags.pop(tag).close()
        for tag in route.tagged:
            if tag not in route.tags:
                route.tags[tag] = await self._listen(
                    functools.partial(self._serve_route, key, tag), (key, tag))
        return RouteUrls(url=route.main.url, tags={t: route.tags[t].url for t in route.tagged})

    async def _remove_route(self, namespace: str, service: str) -> None:
        route = self._routes.pop((namespace, service), None)
        if route is not None:
            await route.main.close()
            for listener in route.tags.values():
                await listener.close()

    async def _listen(self, handle: Callable[[Head, asyncio.StreamReader, asyncio.StreamWriter],
                                             Coroutine[Any, Any, bool]],
                      route: tuple[tuple[str, str], str | None] | None = None) -> _Listener:
        """A loopback URL serving ``handle``; a route's (``(namespace, service), tag``)
        also carries gRPC (h2c) to its revisions."""
        listener: _Listener

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            listener.connections.add(writer)
            h2 = (None if route is None
                  else functools.partial(self._serve_h2, listener, route[0], route[1]))
            try:
                await serve_connection(reader, writer, handle, h2)
            except asyncio.CancelledError:
                # the URL closed under a gRPC splice (undeploy, shutdown): the connection
                # ends here; Python 3.11's stream server would log a cancelled callback
                # task as an error with a traceback
                writer.close()
            except Exception as exc:  # a client's connection: one line, never a traceback
                log.warning("a connection to %s ended: %s: %s",
                            writer.get_extra_info("sockname"), type(exc).__name__, exc)
                writer.close()
            finally:
                listener.connections.discard(writer)

        server = await asyncio.start_server(connected, HOST, 0, limit=MAX_HEAD_BYTES)
        listener = _Listener(server)
        return listener

    # -- the data path -----------------------------------------------------------------

    def _revision(self, key: tuple[str, str], tag: str | None) -> Revision:
        """The revision a request to ``key`` goes to: by ``tag``, else drawn by the split;
        ``RevisionUnavailable`` (503) when there is none."""
        route = self._routes.get(key)
        name = (None if route is None else route.split.pick() if tag is None
                else route.tagged.get(tag))
        revision = None if name is None else self._revisions.get((key[0], name))
        if revision is None:
            what = f"revision {name}" if name else f"a revision for {key[1]}"
            raise RevisionUnavailable(f"{what} is not served")
        return revision

    async def _serve_route(self, key: tuple[str, str], tag: str | None, head: Head,
                           reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if self._draining:
            writer.write(error_response(503, _STOPPING, close=True))
            return False
        self._enter(writer)
        try:
            try:
                revision = self._revision(key, tag)
            except RevisionUnavailable as exc:
                writer.write(error_response(503, exc.message, close=True))
                return False
            keep = await revision.activator.proxy(head, reader, writer)
        except BadGateway as exc:
            if self._draining:  # its instance was stopped at the end of the drain
                writer.write(error_response(503, f"{_STOPPED}: {exc.message}", close=True))
            else:
                writer.write(error_response(502, exc.message, close=True))
            return False
        finally:
            self._leave(writer)
        return keep and not self._draining

    async def _serve_h2(self, listener: _Listener, key: tuple[str, str], tag: str | None,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if listener.grpc is None:
            async with listener.grpc_lock:
                if listener.grpc is None:
                    try:
                        from modelfn.localstack.serving.grpc import GrpcIngress
                    except ImportError:
                        log.warning("an h2c (gRPC) connection to %s/%s was closed: the local "
                                    "platform needs grpcio for gRPC (pip install "
                                    "'modelfn[grpc]')", *key)
                        return
                    listener.grpc = await GrpcIngress.start(
                        functools.partial(self._forward_grpc, key, tag))
        await listener.grpc.splice(reader, writer)

    async def _forward_grpc(self, key: tuple[str, str], tag: str | None, method: str,
                            request: bytes, metadata: Metadata, deadline_s: float | None
                            ) -> bytes:
        """One gRPC call through a route: the revision by split or tag, held while it
        scales from zero, replayed on another instance if its instance died under it."""
        if self._draining:
            raise PlatformStopping
        self._enter(None)
        try:
            activator = self._revision(key, tag).activator
            return await activator.call_grpc(method, request, metadata, deadline_s,
                                             service=key[1])
        finally:
            self._leave(None)

    async def _serve_status(self, head: Head, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> bool:
        if head.length or head.chunked:
            writer.write(error_response(400, "the status endpoint takes no body", close=True))
            return False
        writer.write(json_response(200, await self._describe()))
        return True

    async def _describe(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "revisions": [r.describe() for r in self._revisions.values()],
            "routes": [
                {"namespace": ns, "service": svc, "url": route.main.url,
                 "traffic": [{"revision": t.revision, "percent": t.percent, "tag": t.tag,
                              **({"url": route.tags[t.tag].url} if t.tag in route.tags else {})}
                             for t in route.spec.traffic]}
                for (ns, svc), route in self._routes.items()
            ],
        }
