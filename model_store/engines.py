"""TensorRT engine caches kept in the store beside the version they were built from.

An engine is only valid for the exact model, GPU, TensorRT version and
precision it was built for; ``EngineKey`` names that combination with a stable
slug. Layout::

    <model>/<version>/engines/<slug>/MANIFEST.json   which upload is the engine, its files
    <model>/<version>/engines/<slug>/<upload-id>/... the files of that upload

Engine builds are not byte-reproducible, so two instances that built the same
engine upload under their own upload id and then race to create the small
manifest (only if absent): the first wins, the loser's files are never read,
and nobody's files are overwritten while another reads them.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from modelfn.model_store import manifest as mf
from modelfn.model_store import names
from modelfn.model_store.errors import CorruptObject, InvalidName
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.model_store.base import ModelStore

_UNSAFE = re.compile(r"[^a-z0-9.]+")


@dataclass(frozen=True, slots=True)
class EngineKey:
    model_digest: str
    gpu_name: str
    trt_version: str
    precision: str

    @property
    def slug(self) -> str:
        """e.g. ``nvidia-a10g-trt10.3.0-fp16-3f2a9c0d1e2b4a5c-91d0be7a``: readable and unique."""
        fields = (self.gpu_name, self.trt_version, self.precision, self.model_digest)
        tag = hashlib.sha256("\0".join(fields).encode()).hexdigest()[:8]
        gpu = _UNSAFE.sub("-", self.gpu_name.lower()).strip("-.") or "gpu"
        trt = _UNSAFE.sub("-", self.trt_version.lower()).strip("-.") or "x"
        precision = _UNSAFE.sub("-", self.precision.lower()).strip("-.") or "x"
        return f"{gpu}-trt{trt}-{precision}-{self.model_digest[:16]}-{tag}"


def _prefix(name: str, version: int, key: EngineKey) -> str:
    return f"{names.model_name(name)}/{names.version_number(version)}/engines/{key.slug}/"


def put(store: ModelStore, name: str, version: int, key: EngineKey, files_dir: Path) -> bool:
    model = store.manifest(name, version)
    if key.model_digest != model.digest:
        raise InvalidInput(
            f"engine key is for model digest {key.model_digest[:12]} but version {version} of "
            f"'{name}' has digest {model.digest[:12]}"
        )
    prefix = _prefix(name, version, key)
    manifest_key = prefix + mf.MANIFEST_NAME
    if store._exists(manifest_key):
        return False
    files = mf.scan_dir(files_dir)
    upload = uuid.uuid4().hex
    store._upload(
        [(f"{prefix}{upload}/{f.path}", files_dir / f.path, f.size) for f in files], None
    )
    doc = {
        "key": asdict(key),
        "upload": upload,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "modelfn_version": mf.modelfn_version(),
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files],
    }
    return store._put_if_absent(manifest_key, (json.dumps(doc, indent=2) + "\n").encode())


def get(store: ModelStore, name: str, version: int, key: EngineKey, dest: Path) -> bool:
    prefix = _prefix(name, version, key)
    data = store._get_bytes(prefix + mf.MANIFEST_NAME)
    if data is None:
        return False
    location = f"{store.uri.rstrip('/')}/{prefix}{mf.MANIFEST_NAME}"
    try:
        doc = json.loads(data)
        upload = names.model_name(str(doc["upload"]))
        files = [
            mf.FileEntry(names.relative_path(str(f["path"])), int(f["size"]), str(f["sha256"]))
            for f in doc["files"]
        ]
        recorded = EngineKey(**doc["key"])
    except InvalidName as exc:
        raise CorruptObject(location, f"engine manifest lists an unsafe name: {exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptObject(location, f"not a valid engine manifest ({exc!r})") from exc
    if recorded != key:
        raise CorruptObject(location, f"it describes another engine ({recorded})")
    dest.mkdir(parents=True, exist_ok=True)
    store._download([(f"{prefix}{upload}/{f.path}", f) for f in files], dest, None)
    return True
