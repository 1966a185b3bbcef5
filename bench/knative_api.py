"""What the local Knative API's front door costs a request.

    python bench/knative_api.py [--requests 2000] [--rounds 3]

The same ``KnativeApi`` app (one Service stored) is served three ways on loopback, each
by uvicorn in this process: bare over HTTP (no checks), behind the ``Door`` over HTTP
(bearer token in constant time, Origin, content length), and as ``modelfn dev`` serves it
(the ``Door`` over HTTPS). A client in its own process (httpx, one keep-alive connection,
what the ``kubernetes`` client does) sends ``GET`` of the Service sequentially; the rounds
interleave the three (A B C A B C ...). Medians of the mean microseconds per request.
The machine may be shared: only the differences within one run mean anything.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from modelfn.localstack.knative.api import ApiServer, KnativeApi
from modelfn.localstack.knative.door import Door
from modelfn.localstack.knative.store import ServiceStore
from modelfn.process.supervisor import free_port

PATH = "/apis/serving.knative.dev/v1/namespaces/default/services/digits"
SERVICE = {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
           "metadata": {"name": "digits"},
           "spec": {"template": {"spec": {"containers": [{"image": "modelfn.local/x"}]}}}}
CLIENT = """
import sys, time, httpx
url, token, verify, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with httpx.Client(verify=verify if verify != "-" else False,
                  headers={"authorization": f"Bearer {token}"}) as client:
    for _ in range(200):
        assert client.get(url).status_code == 200
    start = time.perf_counter()
    for _ in range(n):
        client.get(url)
    print((time.perf_counter() - start) / n * 1e6)
"""


def serve_http(app: Any) -> tuple[str, uvicorn.Server]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False,
                                           lifespan="off"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}", server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    store = ServiceStore()
    store.create("default", SERVICE, strict=False)
    token = "t" * 43
    bare_url, bare = serve_http(KnativeApi(store).app)
    door_url, door = serve_http(Door(KnativeApi(store).app, token))
    tls = ApiServer(store, token=token).start()
    with tempfile.TemporaryDirectory() as tmp:
        ca = Path(tmp) / "ca.pem"
        ca.write_bytes(tls.certificate.cert_pem)
        ways = {"bare, HTTP": (bare_url, "-"), "door, HTTP": (door_url, "-"),
                "door, HTTPS (modelfn dev)": (tls.url, str(ca))}
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, (url, verify) in ways.items():
                out = subprocess.run([sys.executable, "-c", CLIENT, url + PATH, token, verify,
                                      str(args.requests)], capture_output=True, text=True,
                                     check=True).stdout
                times[name].append(float(out))
    for server in (bare, door):
        server.should_exit = True
    tls.stop()
    base = statistics.median(times["bare, HTTP"])
    print(f"{'how':<28} {'us/request':>10} {'added':>8}   rounds")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<28} {median:>10.1f} {median - base:>+8.1f}   "
              + " ".join(f"{v:.1f}" for v in values))


if __name__ == "__main__":
    main()
