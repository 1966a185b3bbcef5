"""The channel between the server and a Python model's worker process: framed pickles on
one end of a ``socket.socketpair()``, large array buffers in shared memory.

A message is any picklable object, pickled with protocol 5 so that every contiguous numpy
array leaves its data out of band. A buffer of at least ``SHARED_MEMORY_BYTES`` goes into a
``memfd`` of its own, whose descriptor crosses with the message (``SCM_RIGHTS``); the
receiver maps it and the array it rebuilds reads that mapping, so a large tensor is copied
once, into the memfd, and never through the socket. Smaller buffers travel inline after the
pickle, where a copy costs less than creating and mapping a memfd.

A frame: ``HEAD`` (pickle length, buffer count, descriptor count) sent with the
descriptors; one signed length per buffer (negative: in a memfd, in the order the
descriptors came); the pickle; the inline buffers. Inline buffers are received into one
``bytearray``, so the arrays rebuilt on them are writable, as the ones in memfds are.
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
import struct
import threading
from typing import Any

#: a buffer this large or larger goes in shared memory rather than the socket
SHARED_MEMORY_BYTES = 64 * 1024
#: descriptors one message may carry (the kernel's SCM_MAX_FD is 253); more buffers go inline
MAX_DESCRIPTORS = 200
HEAD = struct.Struct("<QII")
LENGTH = struct.Struct("<q")


class ChannelClosed(EOFError):
    """The other end is gone (its process exited, or closed the channel)."""


class Channel:
    """One end of a socketpair carrying messages; ``send`` may be called from any thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        """Close this end; a thread blocked in ``receive`` sees the end of the channel."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed, or the other end is gone
        self.sock.close()

    def send(self, message: Any) -> None:
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
        lengths: list[int] = []
        inline: list[memoryview] = []
        fds: list[int] = []
        try:
            for buffer in buffers:
                raw = buffer.raw()
                if raw.nbytes >= SHARED_MEMORY_BYTES and len(fds) < MAX_DESCRIPTORS:
                    fds.append(_shared(raw))
                    lengths.append(-raw.nbytes)
                else:
                    inline.append(raw)
                    lengths.append(raw.nbytes)
            parts: list[bytes | memoryview] = [
                HEAD.pack(len(data), len(lengths), len(fds)),
                b"".join(LENGTH.pack(n) for n in lengths), data, *inline]
            with self._send_lock:
                _send_all(self.sock, parts, fds)
        except OSError as exc:
            raise ChannelClosed(str(exc)) from exc
        finally:
            for fd in fds:
                os.close(fd)

    def receive(self) -> Any:
        """The next message; ``ChannelClosed`` at the end of the stream."""
        head, fds = _receive_head(self.sock)
        try:
            size, count, fd_count = HEAD.unpack(head)
            if len(fds) != fd_count:
                raise ChannelClosed(f"a frame announced {fd_count} descriptors, {len(fds)} came")
            table = _exactly(self.sock, LENGTH.size * count) if count else b""
            lengths = [n for (n,) in LENGTH.iter_unpack(table)]
            inline_size = sum(n for n in lengths if n > 0)
            body = _exactly(self.sock, size + inline_size)
            view = memoryview(body)
            buffers: list[Any] = []
            offset, shared = size, iter(fds)
            for n in lengths:
                if n < 0:
                    buffers.append(_mapped(next(shared), -n))
                else:
                    buffers.append(view[offset:offset + n])
                    offset += n
            return pickle.loads(view[:size], buffers=buffers)
        finally:
            for fd in fds:
                os.close(fd)


def pair() -> tuple[Channel, socket.socket]:
    """A channel for this process and the socket to hand to the child (``pass_fds``)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.set_inheritable(True)
    return Channel(ours), theirs


def _shared(raw: memoryview) -> int:
    fd = os.memfd_create("modelfn-tensor", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, raw.nbytes)
        with mmap.mmap(fd, raw.nbytes) as mapped:
            mapped[:] = raw
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mapped(fd: int, size: int) -> mmap.mmap:
    """The memfd's contents, mapped; the arrays rebuilt on it keep the mapping alive."""
    return mmap.mmap(fd, size)


def _send_all(sock: socket.socket, parts: list[bytes | memoryview], fds: list[int]) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
    total = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
    sent = sock.sendmsg(parts, ancillary if fds else [])
    if sent == total:
        return
    rest = memoryview(b"".join(parts))[sent:]  # a partial send: rare, only for large frames
    sock.sendall(rest)


def _receive_head(sock: socket.socket) -> tuple[bytes, list[int]]:
    data, fds, _flags, _address = socket.recv_fds(sock, HEAD.size, MAX_DESCRIPTORS)
    if not data:
        for fd in fds:
            os.close(fd)
        raise ChannelClosed("the channel reached its end")
    if len(data) < HEAD.size:
        data += _exactly(sock, HEAD.size - len(data))
    return data, fds


def _exactly(sock: socket.socket, size: int) -> bytearray:
    body = bytearray(size)
    view = memoryview(body)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ChannelClosed("the channel ended inside a frame")
        got += n
    return body
