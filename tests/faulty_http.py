"""HTTP servers that misbehave on purpose, on loopback: a proxy that delays or corrupts
answers from a real server (the S3 emulator), and a listener that never answers; and
``LoopbackHttpServer``, the threaded server under them and under the tests' canned ones."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable


class LoopbackHttpServer:
    """A ``ThreadingHTTPServer`` for ``handler`` on a free loopback port (``url``), serving
    on its own thread for the length of a ``with`` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class FaultyProxy(LoopbackHttpServer):
    """Forwards every request to ``upstream``; ``delay_s`` holds each answer back, and
    ``corrupt(method, path)`` returning True flips one byte of that answer's body."""

    def __init__(self, upstream: str, *, delay_s: float = 0.0,
                 corrupt: Callable[[str, str], bool] | None = None) -> None:
        target = urlsplit(upstream)
        host, port = target.hostname or "127.0.0.1", target.port or 80
        self.corrupted = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: a stop is a stop

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(host, port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                answer = conn.getresponse()
                data = answer.read()
                conn.close()
                if delay_s:
                    time.sleep(delay_s)
                if data and corrupt is not None and corrupt(self.command, self.path):
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                    proxy.corrupted += 1
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        super().__init__(Handler)


class SilentEndpoint:
    """Accepts TCP connections and never answers: a hung store."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self._socket.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            self._accepted.append(conn)

    def __enter__(self) -> SilentEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._accepted:
            conn.close()
        self._socket.close()
