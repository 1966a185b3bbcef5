"""The local-filesystem backend: a directory laid out exactly like the S3 prefix.

Writes are atomic: files are written to a temporary name and renamed into place,
and "create only if absent" is ``os.link`` of a complete temporary file, which
fails with ``FileExistsError`` when the name exists, so readers never see a
partial object and exactly one of racing creators wins.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

from modelfn.model_store.base import ModelStore
from modelfn.model_store.errors import AccessDenied, CorruptObject, StoreNotFound
from modelfn.runtime.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_CHUNK = 1 << 20


class FileSystemStore(ModelStore):
    def __init__(
        self, root: Path | str, *, cache_dir: Path | str | None = None, workers: int = 8
    ) -> None:
        super().__init__(cache_dir=cache_dir, workers=workers)
        self.root = Path(root).absolute()

    @property
    def uri(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/")) if key else self.root

    def _list_dirs(self, prefix: str) -> list[str]:
        if not prefix and not self.root.is_dir():  # listing models of a store that is not there
            raise StoreNotFound(self.root)
        with self._translate(prefix):
            try:
                return sorted(e.name for e in os.scandir(self._path(prefix.rstrip("/")))
                              if e.is_dir())
            except (FileNotFoundError, NotADirectoryError):
                return []

    def _exists(self, key: str) -> bool:
        with self._translate(key):
            return self._path(key).is_file()

    def _get_bytes(self, key: str) -> bytes | None:
        with self._translate(key):
            try:
                return self._path(key).read_bytes()
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return None

    def _get_file(self, key: str, dest: Path, progress: Callable[[int], None]) -> None:
        with self._translate(key):
            try:
                src = self._path(key).open("rb")
            except FileNotFoundError as exc:
                missing = "listed in the manifest but missing"
                raise CorruptObject(str(self._path(key)), missing) from exc
            with src, dest.open("wb") as out:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                    progress(len(chunk))

    def _put_file(self, key: str, src: Path, progress: Callable[[int], None]) -> None:
        with self._translate(key), self._temp_for(key) as (tmp, out):
            with src.open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    out.write(chunk)
                    progress(len(chunk))
            out.close()
            os.replace(tmp, self._path(key))

    def _put_bytes(self, key: str, data: bytes) -> None:
        with self._translate(key), self._temp_for(key) as (tmp, out):
            out.write(data)
            out.close()
            os.replace(tmp, self._path(key))

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        with self._translate(key), self._temp_for(key) as (tmp, out):
            out.write(data)
            out.close()
            try:
                os.link(tmp, self._path(key))
            except FileExistsError:
                return False
            return True

    def _list_files(self, prefix: str) -> list[str]:
        with self._translate(prefix):
            try:
                return sorted(prefix + e.name for e in os.scandir(self._path(prefix.rstrip("/")))
                              if e.is_file() and not e.name.startswith("."))
            except (FileNotFoundError, NotADirectoryError):
                return []

    def _delete(self, key: str) -> None:
        with self._translate(key):
            self._path(key).unlink(missing_ok=True)

    @contextlib.contextmanager
    def _temp_for(self, key: str) -> Iterator[tuple[Path, IO[bytes]]]:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        out = tempfile.NamedTemporaryFile(
            prefix=".tmp-", dir=target.parent, delete=False
        )
        tmp = Path(out.name)
        try:
            yield tmp, out
        finally:
            out.close()
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    @contextlib.contextmanager
    def _translate(self, key: str) -> Iterator[None]:
        location = str(self._path(key))
        try:
            yield
        except PermissionError as exc:
            raise AccessDenied(location, exc.strerror or "") from exc
        except (FileNotFoundError, NotADirectoryError) as exc:
            if not self.root.is_dir():
                raise StoreError(f"model store directory {self.root} does not exist") from exc
            raise StoreError(f"{location}: {exc.strerror}") from exc
        except OSError as exc:
            raise StoreError(f"{location}: {exc}") from exc
