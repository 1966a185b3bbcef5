from __future__ import annotations

from pathlib import Path

import pytest

from modelfn.model_store import FileSystemStore, S3Store, open_store
from modelfn.model_store import manifest as mf
from modelfn.model_store.cache import default_cache_dir
from modelfn.model_store.errors import BadStoreURI, CorruptObject


def test_digest_names_content_not_order_version_or_time(tmp_path: Path) -> None:
    files = (mf.FileEntry("b", 1, "11"), mf.FileEntry("a", 2, "22"))
    one = mf.build("m", 1, files, b"cfg")
    two = mf.build("m", 7, tuple(reversed(files)), b"cfg")
    assert one.digest == two.digest
    assert mf.build("m", 1, files, b"other cfg").digest != one.digest
    assert mf.build("m", 1, files[:1], b"cfg").digest != one.digest


def test_manifest_round_trip_and_tamper_detection() -> None:
    manifest = mf.build("m", 3, (mf.FileEntry("model.onnx", 5, "ab" * 32),), b"name: 'm'\n")
    data = manifest.to_bytes()
    assert mf.Manifest.from_bytes(data, "x") == manifest
    assert manifest.modelfn_version != "" and manifest.created.endswith("+00:00")
    with pytest.raises(CorruptObject, match="digest does not match"):
        mf.Manifest.from_bytes(data.replace(b"ababab", b"cdcdcd", 1), "x")
    with pytest.raises(CorruptObject, match="config text does not match"):
        mf.Manifest.from_bytes(data.replace(b"name: 'm'", b"name: 'n'"), "x")
    with pytest.raises(CorruptObject, match="not a valid modelfn manifest"):
        mf.Manifest.from_bytes(b"{}", "x")


def test_open_store_by_scheme(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path)), FileSystemStore)
    by_uri = open_store(tmp_path.as_uri())
    assert isinstance(by_uri, FileSystemStore) and by_uri.root == tmp_path
    import boto3

    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="a",
                          aws_secret_access_key="b")
    s3 = open_store("s3://bucket/a/b/", s3_client=client)
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix) == ("bucket", "a/b/")
    with pytest.raises(BadStoreURI, match="unknown scheme 'gs://'"):
        open_store("gs://bucket/x")
    with pytest.raises(BadStoreURI, match="expected s3://bucket/prefix"):
        open_store("s3:///x", s3_client=client)
    with pytest.raises(BadStoreURI, match="must be local"):
        open_store("file://host/x")


def test_cache_dir_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    assert open_store(str(tmp_path / "s")).cache.root == tmp_path / "c"
    monkeypatch.delenv("MODELFN_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "modelfn"
