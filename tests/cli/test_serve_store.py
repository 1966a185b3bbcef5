"""`modelfn push` to the S3 emulator, then `modelfn serve --store` warm-starts from it.

The emulator is moto's server on 127.0.0.1 (real S3 wire protocol); the server is a
real process; requests are counted at the emulator, so "fetched nothing" is measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from servers import Server

from modelfn.localstack.s3 import S3Emulator

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def emulator() -> Iterator[S3Emulator]:
    with S3Emulator() as s3:
        s3.create_bucket("models")
        yield s3


def _env(emulator: S3Emulator, cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MODELFN_S3_ENDPOINT": emulator.endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MODELFN_CACHE": str(cache),
    }


def _serve(emulator: S3Emulator, cache: Path, *refs: str) -> Server:
    args = ["--store", "s3://models/prod"]
    for ref in refs:
        args += ["--model", ref]
    return Server(None, *args, env=_env(emulator, cache))


def _infer(server: Server) -> list[int]:
    request = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
    response = httpx.post(f"http://{server.url}/v2/models/digits/infer", json=request)
    assert response.status_code == 200, response.text
    label = next(o for o in response.json()["outputs"] if o["name"] == "label")
    return list(label["data"])


def test_push_then_serve_from_the_store_and_restart_fetches_nothing(
    emulator: S3Emulator, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES / "models" / "digits", repo / "digits")
    cache = tmp_path / "cache"
    pushed = subprocess.run(
        [sys.executable, "-m", "modelfn.cli.main", "push", str(repo / "digits"),
         "--store", "s3://models/prod"],
        env=_env(emulator, cache), capture_output=True, text=True, check=False,
    )
    assert pushed.returncode == 0, pushed.stderr
    expected = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())

    first = _serve(emulator, cache, "digits:1")
    try:
        first.wait_ready()
        assert _infer(first) == expected["label"]
    finally:
        log = first.stop()
    assert "fetch=" in log

    emulator.clear_requests()
    second = _serve(emulator, cache, "digits:1")
    try:
        second.wait_ready()
        assert _infer(second) == expected["label"]
    finally:
        second.stop()
    assert sum(emulator.operations().values()) == 0, emulator.operations()

    emulator.clear_requests()
    latest = _serve(emulator, cache, "digits")  # latest: a listing, but no download
    try:
        latest.wait_ready()
        assert _infer(latest) == expected["label"]
    finally:
        latest.stop()
    assert emulator.count("GetObject") == 0, emulator.operations()


def test_unknown_model_in_the_store_fails_the_start_with_a_clear_error(
    emulator: S3Emulator, tmp_path: Path
) -> None:
    server = _serve(emulator, tmp_path / "cache", "nope:3")
    out = server.wait_exit()
    assert server.proc.returncode == 3, out
    assert "model 'nope' has no version in the model store s3://models/prod" in out
    assert "push one first, modelfn push DIR --store s3://models/prod" in out


def test_a_model_with_a_label_file_serves_from_the_store_and_leaves_nothing_in_tmp(
    emulator: S3Emulator, tmp_path: Path
) -> None:
    """Triton keeps label files in the model directory: push takes the ones the config
    names into the version, and `serve --store` lays them out beside the config again. The
    checkout in the temporary directory goes when the server stops."""
    model = tmp_path / "models" / "labelled"
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    config = (model / "config.pbtxt").read_text().replace('name: "digits"', 'name: "labelled"')
    (model / "config.pbtxt").write_text(config.replace(
        'dims: [ 10 ]', 'dims: [ 10 ]\n    label_filename: "digits.txt"'))
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    (model / "digits.txt").write_text("\n".join(names) + "\n")
    cache, scratch = tmp_path / "cache", tmp_path / "tmp"
    scratch.mkdir()
    env = {**_env(emulator, cache), "TMPDIR": str(scratch)}
    pushed = subprocess.run(
        [sys.executable, "-m", "modelfn.cli.main", "push", str(model), "--store",
         "s3://models/labels"], env=env, capture_output=True, text=True, check=False)
    assert pushed.returncode == 0, pushed.stderr

    server = Server(None, "--store", "s3://models/labels", "--model", "labelled", env=env)
    try:
        server.wait_ready()
        assert len(list(scratch.glob("modelfn-repo-*"))) == 1
        request = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
        request["outputs"] = [{"name": "probabilities", "parameters": {"classification": 1}}]
        response = httpx.post(f"http://{server.url}/v2/models/labelled/infer", json=request)
        assert response.status_code == 200, response.text
        [output] = response.json()["outputs"]
    finally:
        server.stop()
    expected = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())
    assert [entry.split(":")[2] for entry in output["data"]] == [
        names[label] for label in expected["label"]]
    assert not list(scratch.glob("modelfn-repo-*"))
