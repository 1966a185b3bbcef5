"""The store suite, run against every backend (see conftest.py)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from modelfn.model_store.errors import (
    ConfigConflict,
    CorruptObject,
    IncompleteVersion,
    InvalidName,
    MissingModelFile,
    NoLocalVersion,
    NotInStore,
    VersionClaimed,
    VersionExists,
)
from modelfn.model_store.manifest import FileEntry, build, compute_digest, sha256_bytes
from modelfn.runtime.errors import InvalidInput, ModelNotFound

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.model_store import ModelStore

WEIGHTS = b"\x00onnx-weights" * 1000


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_push_list_fetch(store: ModelStore, make_model: Any) -> None:
    src = make_model({"model.onnx": WEIGHTS, "labels/classes.txt": b"0\n1\n"})
    result = store.push(src)
    assert (result.model, result.version, result.created) == ("digits", 1, True)
    assert result.size == len(WEIGHTS) + 4

    assert store.list_models() == ["digits"]
    [info] = store.list_versions("digits")
    assert (info.version, info.complete, info.files, info.size) == (1, True, 2, len(WEIGHTS) + 4)
    assert info.created.endswith("+00:00") and info.digest == result.digest

    repo = store.fetch("digits", 1)
    assert tree(repo / "digits") == {
        "config.pbtxt": (src / "config.pbtxt").read_bytes(),
        "1/model.onnx": WEIGHTS,
        "1/labels/classes.txt": b"0\n1\n",
    }


def test_store_layout_is_triton_readable(harness: Any, make_model: Any) -> None:
    src = make_model({"model.onnx": WEIGHTS})
    harness.store.push(src)
    assert harness.get_raw("digits/config.pbtxt") == (src / "config.pbtxt").read_bytes()
    assert harness.get_raw("digits/1/model.onnx") == WEIGHTS
    assert b'"digest"' in harness.get_raw("digits/1/MANIFEST.json")


def test_next_free_version_and_latest(store: ModelStore, make_model: Any) -> None:
    store.push(make_model({"model.onnx": b"one"}))
    second = store.push(make_model({"model.onnx": b"two"}))
    assert second.version == 2
    assert store.resolve("digits", "latest") == 2
    assert tree(store.fetch("digits") / "digits")["2/model.onnx"] == b"two"
    assert tree(store.fetch("digits", 1) / "digits")["1/model.onnx"] == b"one"
    assert [v.version for v in store.list_versions("digits")] == [1, 2]


def test_explicit_version_picks_local_dir(store: ModelStore, make_model: Any) -> None:
    src = make_model({"model.onnx": b"three"}, version=3)
    assert store.push(src, version=3).version == 3
    with pytest.raises(NoLocalVersion) as info:
        store.push(src, version=4)
    assert info.value.message == (
        f"{src} has no folder 4/ (its versions: 3): to make version 4, copy one and change it, "
        f"cp -r {src / '3'} {src / '4'}")
    assert info.value.status_code == 400
    assert store.list_versions("digits")[-1].version == 3


def test_a_version_folder_copied_to_a_new_number_goes_in_as_that_number(
        store: ModelStore, make_model: Any) -> None:
    """`cp -r DIR/1 DIR/2; modelfn push DIR` pushes version 2, although 2/ holds what
    version 1 does: push takes the highest local version, it is not the latest's double."""
    import shutil

    src = make_model({"model.onnx": WEIGHTS})
    assert store.push(src).version == 1
    shutil.copytree(src / "1", src / "2")
    second = store.push(src)
    assert (second.version, second.created, second.versions) == (2, True, (1, 2))
    assert second.message.startswith(f"pushed digits version 2 (digest {second.digest[:12]}) "
                                     f"to {store.uri.rstrip('/')}; versions there now: 1, 2")
    again = store.push(src)
    assert (again.version, again.created) == (2, False)
    assert again.message == (
        f"digits version 2 is already in {store.uri.rstrip('/')} with identical content "
        f"(digest {again.digest[:12]}): nothing to push; versions there: 1, 2, the next free "
        "is 3 (copy the version folder to 3/ and change it to push a new version)")
    shutil.copytree(src / "2", src / "5")  # a number above the store's keeps its number
    assert store.push(src).version == 5
    shutil.rmtree(src / "5")
    (src / "2" / "model.onnx").write_bytes(b"retrained")  # a changed one: the next free
    assert store.push(src).version == 6
    assert [v.version for v in store.list_versions("digits")] == [1, 2, 5, 6]


def test_a_push_under_another_name_names_it_in_the_config(
        harness: Any, make_model: Any) -> None:
    src = make_model({"model.onnx": WEIGHTS},
                     config=b'# ours\nname: "digits"  # the model\nmax_batch_size: 8\n')
    result = harness.store.push(src, name="digits-lambda")
    assert result.created
    want = b'# ours\nname: "digits-lambda"  # the model\nmax_batch_size: 8\n'
    assert harness.get_raw("digits-lambda/config.pbtxt") == want
    fetched = harness.store.fetch("digits-lambda", 1)
    assert (fetched / "digits-lambda" / "config.pbtxt").read_bytes() == want
    assert (src / "config.pbtxt").read_bytes().count(b'"digits"') == 1  # the local one stays


def test_identical_repush_is_a_noop(store: ModelStore, make_model: Any) -> None:
    src = make_model({"model.onnx": WEIGHTS})
    first = store.push(src)
    again = store.push(src)
    assert (again.version, again.created, again.digest) == (1, False, first.digest)
    assert "identical" in again.message
    pinned = store.push(src, version=1)
    assert not pinned.created
    assert [v.version for v in store.list_versions("digits")] == [1]


def test_versions_are_immutable(store: ModelStore, make_model: Any) -> None:
    store.push(make_model({"model.onnx": b"original"}))
    with pytest.raises(VersionExists) as info:
        store.push(make_model({"model.onnx": b"changed"}), version=1)
    assert info.value.status_code == 409
    assert "version 1 of model 'digits' already exists" in info.value.message
    assert tree(store.fetch("digits", 1) / "digits")["1/model.onnx"] == b"original"


def test_config_must_agree_across_versions(store: ModelStore, make_model: Any) -> None:
    store.push(make_model({"model.onnx": b"one"}))
    other = make_model({"model.onnx": b"two"}, config=b'name: "digits"\nmax_batch_size: 1\n')
    with pytest.raises(ConfigConflict, match="--force-config"):
        store.push(other)
    assert store.push(other, force_config=True).version == 2
    # each version keeps the config it was pushed with
    assert b"max_batch_size: 8" in (store.fetch("digits", 1) / "digits/config.pbtxt").read_bytes()
    assert b"max_batch_size: 1" in (store.fetch("digits", 2) / "digits/config.pbtxt").read_bytes()


def test_concurrent_push_of_one_version(store: ModelStore, make_model: Any) -> None:
    racers = 6
    sources = [make_model({"model.onnx": f"racer {i}".encode() * 5000}) for i in range(racers)]
    barrier = threading.Barrier(racers)
    outcomes: dict[int, object] = {}

    def race(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = store.push(sources[i], version=1)
        except (VersionClaimed, VersionExists) as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    winners = [i for i, o in outcomes.items() if not isinstance(o, Exception)]
    assert len(outcomes) == racers and len(winners) == 1
    for i, outcome in outcomes.items():
        if i != winners[0]:
            assert isinstance(outcome, VersionClaimed | VersionExists)
            assert "version 1 of model 'digits'" in str(outcome)
    fetched = tree(store.fetch("digits", 1) / "digits")
    assert fetched["1/model.onnx"] == f"racer {winners[0]}".encode() * 5000


def test_concurrent_auto_pushes_get_distinct_versions(store: ModelStore, make_model: Any) -> None:
    sources = [make_model({"model.onnx": f"auto {i}".encode()}) for i in range(4)]
    barrier = threading.Barrier(len(sources))
    versions: list[int] = []

    def push(src: Path) -> None:
        barrier.wait()
        versions.append(store.push(src).version)

    threads = [threading.Thread(target=push, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(versions) == [1, 2, 3, 4]


def test_a_dead_push_blocks_only_other_content(harness: Any, make_model: Any) -> None:
    store = harness.store
    src = make_model({"model.onnx": WEIGHTS})
    digest = store.push(src, version=1).digest
    # a push of version 2 that died after claiming it, with other content
    harness.put_raw("digits/2/.claim.json", b'{"digest": "feed", "created": "then"}')
    with pytest.raises(VersionClaimed, match=r"delete .*digits/2/\.claim\.json"):
        store.push(make_model({"model.onnx": b"other"}, version=2), version=2)
    # a claim with our own digest is taken over: the rerun writes the very same bytes
    harness.put_raw("digits/3/.claim.json", b'{"digest": "%s"}' % digest.encode())
    assert store.push(make_model({"model.onnx": WEIGHTS}, version=3), version=3).created


def test_corrupt_object_is_retried_then_reported(harness: Any, make_model: Any) -> None:
    store = harness.store
    store.push(make_model({"model.onnx": WEIGHTS, "extra.bin": b"ok"}))
    harness.put_raw("digits/1/model.onnx", WEIGHTS[:-1] + b"X")
    if harness.emulator is not None:
        harness.emulator.clear_requests()
    with pytest.raises(CorruptObject, match=r"digits/1/model\.onnx: sha256 .*after one retry"):
        store.fetch("digits", 1)
    if harness.emulator is not None:
        assert harness.emulator.count("GetObject", key_suffix="digits/1/model.onnx") == 2
    harness.put_raw("digits/1/model.onnx", WEIGHTS[:100])
    with pytest.raises(CorruptObject, match="truncated"):
        store.fetch("digits", 1)
    assert not list((store.cache.root / "digits").glob(".tmp-*"))


def test_missing_object_is_reported(harness: Any, make_model: Any) -> None:
    harness.store.push(make_model({"model.onnx": WEIGHTS, "extra.bin": b"ok"}))
    harness.delete_raw("digits/1/extra.bin")
    with pytest.raises(CorruptObject, match=r"digits/1/extra\.bin: listed in the manifest but"):
        harness.store.fetch("digits", 1)


def test_version_without_manifest(harness: Any, make_model: Any) -> None:
    store = harness.store
    store.push(make_model({"model.onnx": WEIGHTS}))
    harness.put_raw("digits/2/model.onnx", b"half pushed")
    with pytest.raises(IncompleteVersion) as info:
        store.fetch("digits", 2)
    assert info.value.message == (
        "version 2 of model 'digits' has no MANIFEST.json: incomplete push or not a modelfn store"
    )
    assert info.value.status_code == 404
    assert store.resolve("digits", "latest") == 1
    assert [(v.version, v.complete) for v in store.list_versions("digits")] == [
        (1, True), (2, False)
    ]
    # the next free version skips the incomplete one
    assert store.push(make_model({"model.onnx": b"new"})).version == 3


def test_not_a_modelfn_store(harness: Any) -> None:
    harness.put_raw("plain/config.pbtxt", b"")
    harness.put_raw("plain/1/model.onnx", b"weights")
    with pytest.raises(IncompleteVersion, match="version 1 of model 'plain' has no MANIFEST"):
        harness.store.fetch("plain")


def test_pinned_cache_hit_reads_nothing(harness: Any, make_model: Any, tmp_path: Path) -> None:
    store = harness.store
    store.push(make_model({"model.onnx": WEIGHTS}))
    cold = harness.open_again(tmp_path / "cold-cache")
    first = cold.fetch("digits", 1)
    if harness.emulator is not None:
        harness.emulator.clear_requests()
    elif harness.kind == "filesystem":
        harness.make_unreadable()  # nothing to read from: any read would fail
    warm = harness.open_again(tmp_path / "cold-cache")  # a new process, same disk
    assert warm.fetch("digits", 1) == first
    if harness.emulator is not None:
        assert harness.emulator.operations() == {}


def test_cache_entry_is_keyed_by_digest(store: ModelStore, make_model: Any) -> None:
    result = store.push(make_model({"model.onnx": WEIGHTS}))
    path = store.fetch("digits", 1)
    assert path == store.cache.root / "digits" / result.digest / "1"
    assert (path / "MANIFEST.json").is_file()


def test_progress_reports_every_byte(store: ModelStore, make_model: Any, tmp_path: Path) -> None:
    pushed: list[tuple[int, int]] = []
    src = make_model({"a.bin": WEIGHTS, "b.bin": b"xyz"})
    store.push(src, progress=lambda n, t: pushed.append((n, t)))
    assert sum(n for n, _ in pushed) == len(WEIGHTS) + 3
    assert {t for _, t in pushed} == {len(WEIGHTS) + 3}
    fetched: list[int] = []
    store.fetch("digits", 1, progress=lambda n, t: fetched.append(n))
    assert sum(fetched) == len(WEIGHTS) + 3


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../x", "'..' segments are not allowed"),
        ("/abs", "absolute paths are not allowed"),
        ("a/../../b", "'..' segments are not allowed"),
        ("a/b", "'/' is not allowed in a model name"),
        ("a\\b", "backslashes are not allowed"),
        ("bad\x00name", "control characters are not allowed"),
        ("", "must not be empty"),
    ],
)
def test_unsafe_model_names(store: ModelStore, name: str, reason: str) -> None:
    with pytest.raises(InvalidName) as info:
        store.fetch(name, 1)
    assert info.value.status_code == 400
    assert reason in info.value.message and repr(name) in info.value.message


def test_unsafe_path_in_a_manifest(harness: Any, make_model: Any) -> None:
    store = harness.store
    store.push(make_model({"model.onnx": WEIGHTS}))
    manifest = harness.get_raw("digits/1/MANIFEST.json")
    harness.put_raw("digits/1/MANIFEST.json", manifest.replace(b'"model.onnx"', b'"../../evil"'))
    with pytest.raises(CorruptObject, match=r"unsafe name.*'\.\.' segments"):
        store.fetch("digits", 1)
    assert not list(store.cache.root.rglob("evil"))


def test_unknown_model_and_version(store: ModelStore, make_model: Any) -> None:
    with pytest.raises(ModelNotFound) as info:
        store.fetch("nope", 1)
    assert info.value.status_code == 404 and "'nope'" in info.value.message
    with pytest.raises(ModelNotFound):
        store.fetch("nope")
    with pytest.raises(ModelNotFound):
        store.list_versions("nope")
    store.push(make_model({"model.onnx": WEIGHTS}))
    with pytest.raises(ModelNotFound, match="version 7 of model 'digits' is not in"):
        store.fetch("digits", 7)


def test_what_the_store_lacks_is_named_with_what_it_has(
        store: ModelStore, make_model: Any) -> None:
    """Every command meets a missing model or version through the store, so the store says
    where it looked, what is there, and how to put the one asked for there."""
    uri = store.uri.rstrip("/")
    push = f"modelfn push DIR --store {uri}"
    with pytest.raises(NotInStore) as empty:
        store.fetch("digits")
    assert empty.value.message == (f"model 'digits' has no version in the model store {uri} "
                                   f"(it has no models): push one first, {push}")
    store.push(make_model({"model.onnx": WEIGHTS}))
    store.push(make_model({"model.onnx": b"two"}))
    store.push(make_model({"model.onnx": WEIGHTS}, name="iris"))
    with pytest.raises(NotInStore) as version:
        store.manifest("digits", 7)
    assert version.value.message == (
        f"version 7 of model 'digits' is not in the model store {uri} (versions there: 1, 2): "
        f"push it first, {push}")
    assert version.value.status_code == 404
    for missing in (lambda: store.fetch("nope", 1), lambda: store.resolve("nope"),
                    lambda: store.list_versions("nope")):
        with pytest.raises(NotInStore) as model:
            missing()
        assert model.value.message == (
            f"model 'nope' has no version in the model store {uri} (models there: digits, "
            f"iris): push one first, {push}")


@pytest.mark.parametrize("version", [0, -1, "abc", "01x"])
def test_bad_versions(store: ModelStore, version: int | str) -> None:
    with pytest.raises(InvalidInput, match="expected a positive integer"):
        store.fetch("digits", version)


def test_reserved_names_in_a_version(store: ModelStore, make_model: Any) -> None:
    with pytest.raises(InvalidInput, match="'MANIFEST.json' is reserved"):
        store.push(make_model({"MANIFEST.json": b"{}"}))



LABELLED = (b'name: "digits"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
            b'output [{ name: "probs" data_type: TYPE_FP32 dims: [2] '
            b'label_filename: "labels.txt" }]\n')


def test_label_files_go_with_the_version(harness: Any, make_model: Any) -> None:
    store = harness.store
    src = make_model({"model.onnx": WEIGHTS}, config=LABELLED)
    (src / "labels.txt").write_bytes(b"cat\ndog\n")
    result = store.push(src)
    assert (result.files, result.size) == (2, len(WEIGHTS) + 8)
    assert harness.get_raw("digits/1/.model/labels.txt") == b"cat\ndog\n"
    manifest = store.manifest("digits", 1)
    assert [(f.path, f.size) for f in manifest.model_files] == [("labels.txt", 8)]
    [info] = store.list_versions("digits")
    assert (info.files, info.size) == (2, len(WEIGHTS) + 8)
    assert tree(store.fetch("digits", 1) / "digits") == {
        "config.pbtxt": LABELLED, "labels.txt": b"cat\ndog\n", "1/model.onnx": WEIGHTS}
    # the labels are part of the content: other labels are another version
    (src / "labels.txt").write_bytes(b"dog\ncat\n")
    assert store.push(src).version == 2
    assert tree(store.fetch("digits", 2) / "digits")["labels.txt"] == b"dog\ncat\n"
    assert tree(store.fetch("digits", 1) / "digits")["labels.txt"] == b"cat\ndog\n"


def test_a_changed_cached_label_file_is_fetched_again(store: ModelStore, make_model: Any
                                                      ) -> None:
    src = make_model({"model.onnx": WEIGHTS}, config=LABELLED)
    (src / "labels.txt").write_bytes(b"cat\ndog\n")
    store.push(src)
    (store.fetch("digits", 1) / "digits" / "labels.txt").write_bytes(b"cow\ndog\n")
    assert tree(store.fetch("digits", 1) / "digits")["labels.txt"] == b"cat\ndog\n"


def test_a_missing_label_file_is_refused_before_anything_is_written(
        harness: Any, make_model: Any) -> None:
    src = make_model({"model.onnx": WEIGHTS}, config=LABELLED)
    with pytest.raises(MissingModelFile) as info:
        harness.store.push(src)
    assert info.value.status_code == 400
    assert info.value.message == (
        f"{src / 'labels.txt'} does not exist, but config.pbtxt names it (output 'probs' "
        "label_filename); put it in the model directory beside config.pbtxt")
    if harness.client is not None:
        listed = harness.client.list_objects_v2(Bucket=harness.bucket)
        assert listed["KeyCount"] == 0
    else:
        assert not harness.root.exists()


def test_a_version_stored_without_label_files_stays_readable(harness: Any) -> None:
    """Versions pushed before label files were stored: no ``model_files`` in the manifest,
    and the digest as it always was."""
    files = (FileEntry("model.onnx", len(WEIGHTS), sha256_bytes(WEIGHTS)),)
    old = build("digits", 1, files, LABELLED)
    assert old.digest == compute_digest(files, sha256_bytes(LABELLED))
    assert b"model_files" not in old.to_bytes()
    harness.put_raw("digits/config.pbtxt", LABELLED)
    harness.put_raw("digits/1/model.onnx", WEIGHTS)
    harness.put_raw("digits/1/MANIFEST.json", old.to_bytes())
    assert [v.complete for v in harness.store.list_versions("digits")] == [True]
    assert tree(harness.store.fetch("digits", 1) / "digits") == {
        "config.pbtxt": LABELLED, "1/model.onnx": WEIGHTS}


def test_one_corrupt_manifest_does_not_hide_the_other_versions(
        harness: Any, make_model: Any) -> None:
    store = harness.store
    for data in (b"one", b"two", b"three"):
        store.push(make_model({"model.onnx": data}))
    harness.put_raw("digits/2/MANIFEST.json", b"{not json")
    listed = store.list_versions("digits")
    assert [(v.version, v.complete) for v in listed] == [(1, True), (2, False), (3, True)]
    assert listed[1].corrupt.startswith("corrupt object ") and "digits/2/MANIFEST.json" in \
        listed[1].corrupt
    assert not listed[0].corrupt and not listed[2].corrupt


@pytest.mark.parametrize("name", ["_routes", "engines"])
def test_names_the_store_keeps_for_itself_are_refused(
        store: ModelStore, make_model: Any, name: str) -> None:
    with pytest.raises(InvalidName, match=f"invalid model name '{name}': the name is reserved"):
        store.push(make_model({"model.onnx": WEIGHTS}), name=name)
    with pytest.raises(InvalidName, match="reserved"):
        store.fetch(name)


def test_model_names_are_capped_below_the_file_name_limit(
        store: ModelStore, make_model: Any) -> None:
    src = make_model({"model.onnx": WEIGHTS})
    with pytest.raises(InvalidInput, match="301 characters, at most 200 are allowed"):
        store.push(src, name="a" * 301)
    with pytest.raises(InvalidInput, match="at most 200"):
        store.fetch("a" * 301)
    longest = "a" * 200  # fits, with the cache's and the store's temporary names beside it
    assert store.push(src, name=longest).created
    assert tree(store.fetch(longest, 1) / longest)["1/model.onnx"] == WEIGHTS


def test_a_checkout_never_replaces_a_local_repositorys_files(store: ModelStore,
                                                             make_model: Any,
                                                             tmp_path: Path) -> None:
    """A checkout links into an empty directory of its own. Over a local repository it
    would replace the user's config.pbtxt with a link (their edits lost) and serve their
    own version directory in the store's place, unverified: refused, nothing touched."""
    import shutil

    from modelfn.model_store.checkout import checkout
    from modelfn.model_store.errors import CheckoutConflict

    src = make_model({"model.onnx": WEIGHTS})
    store.push(src)
    local = tmp_path / "local"
    shutil.copytree(src, local / "digits")
    (local / "digits" / "config.pbtxt").write_text("# mine\n")
    before = tree(local)
    with pytest.raises(CheckoutConflict, match="belongs to a local repository"):
        checkout(store, [("digits", 1)], into=local)
    assert tree(local) == before
    assert not (local / "digits" / "config.pbtxt").is_symlink()

    again = tmp_path / "checkout"  # a checkout of its own takes the same refs twice
    checkout(store, [("digits", 1)], into=again)
    checkout(store, [("digits", 1)], into=again)
    assert (again / "digits" / "config.pbtxt").is_symlink()
    assert (again / "digits" / "1" / "model.onnx").read_bytes() == WEIGHTS
