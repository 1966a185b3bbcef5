"""The example repository as ``modelfn serve examples/models`` serves it (a real process, REST
and gRPC): the ``digits_image`` and ``snippet`` ensembles answer their request files as
``requests/*_expected.json`` says, through tritonclient over HTTP and gRPC and through
the request file as curl sends it; bad images and text fail alone with 400."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton
from PIL import Image
from servers import Server
from tritonclient.utils import InferenceServerException

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REQUESTS = EXAMPLES / "requests"
IMAGES = json.loads((REQUESTS / "digits_image_expected.json").read_text())["images"]
SNIPPET = json.loads((REQUESTS / "snippet_expected.json").read_text())
MODELS = ("digits", "digits_preprocess", "digits_postprocess", "digits_image",
          "snippet_tokenizer", "snippet_classifier", "snippet")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server(EXAMPLES / "models", grpc=True)
    try:
        running.wait_ready(timeout=90)
        yield running
    finally:
        log = running.stop()
        assert running.proc.returncode == 0, log
        assert "Traceback" not in log, log[-3000:]


@pytest.fixture
def http(server: Server) -> Iterator[triton.InferenceServerClient]:
    with triton.InferenceServerClient(server.url) as client:
        yield client


@pytest.fixture
def grpc(server: Server) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(server.grpc_url) as client:
        yield client


def bytes_input(module: Any, name: str, items: list[bytes]) -> Any:
    array = np.array([[item] for item in items], dtype=object)
    tensor = module.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


def images(names: list[str]) -> list[bytes]:
    return [(REQUESTS / "digits_image" / name).read_bytes() for name in names]


def assert_digits(names: list[str], labels: np.ndarray, top: np.ndarray) -> None:
    assert labels.reshape(-1).tolist() == [IMAGES[n]["label"] for n in names]
    for name, row in zip(names, top, strict=True):
        digits = [entry.decode().split(":") for entry in row]
        expected = [entry.split(":") for entry in IMAGES[name]["top"]]
        assert [d for d, _ in digits] == [d for d, _ in expected], name
        # a batch of another size moves the last float bits, never a score by 0.01
        assert np.allclose([float(s) for _, s in digits], [float(s) for _, s in expected],
                           atol=0.011), name


def refused(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def test_every_example_model_loads(http: triton.InferenceServerClient) -> None:
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert sorted(index) == sorted(MODELS)
    assert {m["state"] for m in index.values()} == {"READY"}, index


def test_digits_image_answers_the_request_images_over_http(
        http: triton.InferenceServerClient) -> None:
    names = list(IMAGES)
    answer = http.infer("digits_image", [bytes_input(triton, "IMAGE", images(names))])
    assert_digits(names, answer.as_numpy("LABEL"), answer.as_numpy("TOP"))
    right = [IMAGES[n]["label"] == IMAGES[n]["true_label"] for n in names]
    assert sum(right) == json.loads((REQUESTS / "digits_image_expected.json").read_text())[
        "images_right"]


def test_digits_image_answers_each_image_alone_over_grpc_at_once(
        grpc: triton_grpc.InferenceServerClient) -> None:
    names = list(IMAGES)

    def ask(name: str) -> tuple[np.ndarray, np.ndarray]:
        answer = grpc.infer("digits_image", [bytes_input(triton_grpc, "IMAGE", images([name]))])
        return answer.as_numpy("LABEL"), answer.as_numpy("TOP")

    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(pool.map(ask, names))
    assert_digits(names, np.concatenate([a[0] for a in answers]),
                  np.concatenate([a[1] for a in answers]))


def test_digits_image_answers_the_top_output_alone(http: triton.InferenceServerClient) -> None:
    name = next(iter(IMAGES))
    answer = http.infer("digits_image", [bytes_input(triton, "IMAGE", images([name]))],
                        outputs=[triton.InferRequestedOutput("TOP")])
    assert answer.as_numpy("LABEL") is None
    assert answer.as_numpy("TOP")[0][0].decode().startswith(f"{IMAGES[name]['label']}:")


def test_an_undecodable_image_fails_its_request_alone_with_400(
        http: triton.InferenceServerClient, grpc: triton_grpc.InferenceServerClient) -> None:
    good = images([next(iter(IMAGES))])[0]
    error = refused(lambda: http.infer(
        "digits_image", [bytes_input(triton, "IMAGE", [good, b"not a picture"])]))
    assert error.status() == "400"
    assert "IMAGE row 1: 13 bytes in no image format Pillow reads" in error.message()
    assert "model 'digits_preprocess'" in error.message()
    truncated = refused(lambda: grpc.infer(
        "digits_image", [bytes_input(triton_grpc, "IMAGE", [good[:len(good) // 2]])]))
    assert truncated.status() == "StatusCode.INVALID_ARGUMENT"
    assert "IMAGE row 0" in truncated.message() and "broken image" in truncated.message()
    answer = http.infer("digits_image", [bytes_input(triton, "IMAGE", [good])])
    assert answer.as_numpy("LABEL").tolist() == [[IMAGES[next(iter(IMAGES))]["label"]]]


def test_an_image_too_large_to_decode_is_refused_before_decoding(
        http: triton.InferenceServerClient) -> None:
    out = io.BytesIO()
    Image.new("L", (5000, 4000), 255).save(out, "PNG")  # 20 MP of white, 20 KB as PNG
    error = refused(lambda: http.infer(
        "digits_image", [bytes_input(triton, "IMAGE", [out.getvalue()])]))
    assert error.status() == "400"
    assert "a 5000×4000 image: more than 16777216 pixels" in error.message()


def test_snippet_request_file_answers_as_curl_sends_it(server: Server) -> None:
    answer = httpx.post(f"http://{server.url}/v2/models/snippet/infer",
                        content=(REQUESTS / "snippet.json").read_bytes(), timeout=30)
    assert answer.status_code == 200, answer.text
    [output] = answer.json()["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == (
        "PROBABILITIES", "BYTES", [len(SNIPPET["class"]), 1])
    # Triton's classification entries: "probability:index:label"
    entries = [entry.split(":") for entry in output["data"]]
    assert [label for _, _, label in entries] == SNIPPET["class"]
    assert [SNIPPET["labels"][int(index)] for _, index, _ in entries] == SNIPPET["class"]
    assert all(1 / 3 < float(p) <= 1 for p, _, _ in entries)


def test_snippet_over_grpc_gives_probabilities_or_the_class(
        grpc: triton_grpc.InferenceServerClient) -> None:
    texts = json.loads((REQUESTS / "snippet.json").read_text())["inputs"][0]["data"]
    tensor = bytes_input(triton_grpc, "TEXT", [t.encode() for t in texts])
    probabilities = grpc.infer("snippet", [tensor]).as_numpy("PROBABILITIES")
    assert probabilities.shape == (len(texts), 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    assert [SNIPPET["labels"][i] for i in probabilities.argmax(axis=1)] == SNIPPET["class"]
    ranked = grpc.infer("snippet", [tensor], outputs=[
        triton_grpc.InferRequestedOutput("PROBABILITIES", class_count=3)])
    rows = ranked.as_numpy("PROBABILITIES")
    assert [row[0].decode().split(":")[2] for row in rows] == SNIPPET["class"]
    assert all(len({e.decode().split(":")[2] for e in row}) == 3 for row in rows)


def test_text_that_is_not_utf8_fails_its_request_alone_with_400(
        http: triton.InferenceServerClient) -> None:
    error = refused(lambda: http.infer(
        "snippet", [bytes_input(triton, "TEXT", [b"ls -la", b"caf\xe9 au lait"])]))
    assert error.status() == "400"
    assert "TEXT row 1 is not UTF-8" in error.message()
    answer = http.infer("snippet", [bytes_input(triton, "TEXT", [b"import numpy as np"])],
                        outputs=[triton.InferRequestedOutput("PROBABILITIES", class_count=1)])
    assert answer.as_numpy("PROBABILITIES")[0][0].decode().endswith(":python")


def test_the_digits_request_file_still_answers(server: Server) -> None:
    answer = httpx.post(f"http://{server.url}/v2/models/digits/infer",
                        content=(REQUESTS / "digits.json").read_bytes(), timeout=30)
    labels = next(o for o in answer.json()["outputs"] if o["name"] == "label")["data"]
    assert labels == json.loads((REQUESTS / "digits_expected.json").read_text())["label"]
