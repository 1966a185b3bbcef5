"""Large JSON request bodies decoded in a helper process, so the event loop keeps serving.

JSON parsing holds the GIL from start to end (orjson, like the standard library), so a
worker thread would not help: a 40 MiB body of numbers takes over a second to parse, and
every other request on the loop would wait for it. A body whose JSON part is larger than
``OFFLOAD_BYTES`` is decoded by the same ``ModelCodec.decode`` in one spawned helper
process instead (started on the first such body), and the decoded request, whose
tensors are compact numpy arrays, comes back pickled. The loop only copies bytes.

Errors come back as (status, message) and are raised here as the same kind of
``ModelfnError``; a helper that dies (killed for memory) is replaced on the next body.

The helper dies with the thread that started it (Linux's parent-death signal), so a server
killed with SIGKILL leaves no helper behind; multiprocessing's ``resource_tracker``, which
lives until every process holding its pipe is gone, then exits too.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from modelfn.runtime.errors import InvalidInput, ModelfnError, Unsupported

if TYPE_CHECKING:
    from modelfn.protocol.codec import InferRequest, ModelCodec

#: JSON parts larger than this are decoded in the helper process (their parse holds the GIL for
#: tens of ms)
OFFLOAD_BYTES = 1024 * 1024

_ERRORS: dict[int, type[ModelfnError]] = {400: InvalidInput, 501: Unsupported}
_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None


def _decode(codec: ModelCodec, body: bytes | bytearray, header_length: int | None
            ) -> InferRequest | tuple[int, str]:
    """In the helper: decode, or report the error as (status, message)."""
    try:
        return codec.decode(body, header_length)
    except ModelfnError as exc:
        return exc.status_code, exc.message


#: prctl(2)'s option asking for a signal when the parent thread exits, and SIGKILL (Linux)
_PR_SET_PDEATHSIG, _SIGKILL = 1, 9


def _die_with(parent: int) -> None:
    """In the helper, first: be killed when the thread that started it exits; exit now
    if the parent is already gone (then nobody would signal it)."""
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, _SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _executor() -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # spawn, not fork: the server has threads (ORT, the batcher) a fork would copy
            context = multiprocessing.get_context("spawn")
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=context,
                                        initializer=_die_with, initargs=(os.getpid(),))
        return _pool


async def decode(codec: ModelCodec, body: bytes | bytearray, header_length: int | None
                 ) -> InferRequest:
    """``codec.decode(body, header_length)`` in the helper process."""
    global _pool
    loop = asyncio.get_running_loop()
    pool = _executor()
    try:
        result = await loop.run_in_executor(pool, _decode, codec, body, header_length)
    except BrokenProcessPool:
        with _lock:
            if _pool is pool:
                _pool = None
        raise ModelfnError("the JSON decoder process died while decoding the request "
                           "(out of memory?); send large tensors as binary data") from None
    if isinstance(result, tuple):
        status, message = result
        raise _ERRORS.get(status, ModelfnError)(message)
    return result


def shutdown() -> None:
    """Stop the helper process, if one was started."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
