"""A V2 client on one raw socket, for what httpx does not do (``Expect: 100-continue``)."""

from __future__ import annotations

import socket


class Raw:
    """A client on one raw socket, for what httpx does not do (``Expect: 100-continue``):
    ``head`` is the next response head, or b"" when none came within ``timeout_s``."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.buffer = b""

    def head(self, timeout_s: float) -> bytes:
        self.sock.settimeout(timeout_s)
        try:
            while b"\r\n\r\n" not in self.buffer:
                if not (data := self.sock.recv(65536)):
                    return b""
                self.buffer += data
        except TimeoutError:
            return b""
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head

    def body(self, head: bytes) -> bytes:
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        self.sock.settimeout(30)
        while len(self.buffer) < length and (data := self.sock.recv(65536)):
            self.buffer += data
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return body
