"""Lambda SnapStart: what an execution environment restored from a snapshot must redo.

With SnapStart, Lambda runs a published version's init phase once (importing
``handlers/aws_lambda``: the models are loaded and warmed), snapshots that environment's
memory and disk, and starts new environments by restoring copies of it. Whatever the init
left in memory is then the same in every copy, and as old as the snapshot:

- **Random state.** Python's ``random`` and numpy's global generator would draw the same
  numbers in every restored environment (botocore's retry jitter uses ``random``, so
  their retries would fall in step). ``restore`` re-seeds both from the kernel.
  ``os.urandom``, ``secrets`` and ``uuid.uuid4`` read the kernel on each call and need
  nothing; warmup data comes from a fixed seed on purpose.
- **Network connections.** Sockets opened at init are dead after a restore: the S3 client
  that checked the model out of the store (kept for the TensorRT engine cache) drops its
  pool (``ModelStore.drop_connections``) and reconnects on its next request. Credentials
  are not cached by modelfn: boto3 reads them from the environment's provider and renews
  them when they expire.
- **Time.** modelfn keeps no deadline or expiry from init. The cold-start phases
  (``import``, ``fetch``, ``session``, ``warmup``) describe the init that was snapshotted,
  which is what they measure; a restored environment's first invocation still reports
  ``ColdStart`` (Powertools' flag is set at init and cleared by the first invocation).
- **Unique ids.** modelfn makes none at init: request ids come with each event.

``install`` registers ``restore`` with ``snapshot_restore_py``, the runtime hook registry
the managed Python runtime provides and awslambdaric (which runs the hooks in container
images) depends on. Where that module is missing, nothing is registered: an environment
that is never restored needs none of this.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from modelfn.runtime.repository import Repository

log = logging.getLogger("modelfn.snapstart")


def reseed() -> None:
    """New seeds from the kernel for Python's ``random`` and numpy's global generator."""
    random.seed()
    np.random.seed()


def restore(repository: Repository) -> None:
    """What a restored environment redoes before its first invocation."""
    from modelfn.model_store.engine_cache import EngineCache

    reseed()
    if isinstance(repository.engines, EngineCache):  # a function checked out of a store
        repository.engines.store.drop_connections()
    log.info("restored from a SnapStart snapshot: re-seeded, store connections dropped")


def install(repository: Repository) -> bool:
    """Register ``restore`` as an after-restore hook; False where the runtime has no hooks."""
    try:
        from snapshot_restore_py import register_after_restore
    except ImportError:
        return False
    register_after_restore(restore, repository)
    return True
