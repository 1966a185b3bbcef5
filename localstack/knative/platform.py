"""The local Knative API, whole: the store, its REST server and the reconciler over a plane.

``with KnativePlatform(plane) as knative:`` serves ``serving.knative.dev/v1`` Services at
``knative.url``; ``knative.write_kubeconfig(path)`` points ``kubectl`` and the
``kubernetes`` client at it, with the token the API asks of every request and the
certificate it serves. The serving plane is the caller's: started before, stopped after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.localstack.knative.api import ApiServer
from modelfn.localstack.knative.reconciler import Reconciler
from modelfn.localstack.knative.store import ServiceStore
from modelfn.localstack.state import CONTEXT

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.localstack.plane import ServingPlane


class KnativePlatform:
    def __init__(self, plane: ServingPlane, *, port: int = 0) -> None:
        self.plane = plane
        self.store = ServiceStore()
        self.server = ApiServer(self.store, port=port)
        self.reconciler = Reconciler(self.store, plane)
        self._started = False

    @property
    def url(self) -> str:
        """The API server's URL (``http://127.0.0.1:PORT``)."""
        return self.server.url

    def start(self) -> KnativePlatform:
        self.reconciler.start()
        try:
            self.server.start()
        except BaseException:
            self.reconciler.stop()
            raise
        self._started = True
        return self

    def stop(self) -> None:
        """Stop serving the API and reconciling; the plane's revisions are left to the plane
        (its ``stop()`` drains them)."""
        if not self._started:
            return
        self.server.stop()
        self.reconciler.stop()
        self._started = False

    def __enter__(self) -> KnativePlatform:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path, context: str = CONTEXT,
                         namespace: str = "default") -> None:
        self.server.write_kubeconfig(path, context=context, namespace=namespace)
