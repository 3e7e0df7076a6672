"""Check what you use, use what you checked (issue 31, breaks 1, 2, 7, 8 and 11).

Each test plays one attack of the issue deterministically, at the moment that broke the
promise on main: the file system is made to answer as a second process renaming files in
the folder would, and the result must be the signed (or validated) bytes' own, checked
against a float64 oracle, or a typed `RlxError`. The same attacks, raced by a real second
process, are in test_races.py.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil

import numpy as np
import pytest

import rlx
from rlx.artifact import RlxFile, write_rlx
from rlx.artifact.model import RlxIo
from rlx.artifact.signing import generate_keypair, save_keypair, sign_artifact
from rlx.errors import ArtifactError, RlxError
from tests.engines.conftest import feeds, mlp_graph, require, write_mlp

PREPACKS = ["mapped", "heap", "off"]


# each signature format: rlx's .sig (Ed25519) and a model-signing bundle (ECDSA)
KEY_KINDS = {"rlx": "ed25519", "model-signing": "ecdsa-p256"}


def signed_by(path, folder, fmt: str):
    """Sign `path` in format `fmt` with a new key (a PEM file, as model-signing wants): its
    public key."""
    key = generate_keypair(KEY_KINDS[fmt])
    private, _ = save_keypair(key, folder / f"{fmt}.key", overwrite=True)
    sign_artifact(path, private, format=fmt)
    return key.public_key()


@pytest.fixture(params=KEY_KINDS)
def pair(tmp_path, request):
    """A signed model at `model.rlx` and an unsigned one of the same size beside it."""
    signed = write_mlp(tmp_path / "model.rlx", seed=0)
    foreign = write_mlp(tmp_path / "foreign.rlx", seed=1)
    public = signed_by(signed.path, tmp_path, request.param)
    assert signed.path.stat().st_size == foreign.path.stat().st_size
    return signed, foreign, public


def assert_runs(model, oracle) -> None:
    x = feeds()["x"]
    for got, want in zip(model.run({"x": x}), oracle(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# -- break 2: the signature checked over one file, another one read ------------------------
def test_a_file_swapped_in_after_the_signature_check_is_never_run(pair, monkeypatch):
    """The first open of the path sees the signed file; every later one the unsigned file
    an attacker renamed over it (and the signed inode is back before any `stat`). Main
    hashed the first and ran the second."""
    signed, foreign, public = pair
    real_open, opened = os.open, []
    target = os.fspath(signed.path)

    def swapping_open(path, flags, *args, **kwargs):
        if os.fspath(path) == target:
            opened.append(path)
            if len(opened) > 1:
                path = os.fspath(foreign.path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swapping_open)
    try:
        model = rlx.load(signed.path, engine="numpy", trusted_keys=[public])
    except RlxError:
        return  # refused: within the contract
    assert_runs(model, signed.oracle)


def _dir_package(folder, mlp) -> str:
    from rlx.artifact import open_artifact, write_rlxp

    write_rlxp(folder, open_artifact(mlp.path), "dir")
    return os.fspath(folder)


def _files(folder: str) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), folder)
            for root, _, names in os.walk(folder) for name in names}


def _swap_in(folder: str, other: str):
    """Rename the foreign package's differing files into `folder` (its rlx.json over the
    signed one, which is set aside): the paths it put there, and how to undo it (the
    signed files come back with their own inodes and mtimes)."""
    aside, added = [], []
    for name in sorted(_files(other)):
        source, target = os.path.join(other, name), os.path.join(folder, name)
        if os.path.exists(target):
            if filecmp.cmp(source, target, shallow=False):
                continue
            os.replace(target, target + ".aside")
            aside.append(target)
        shutil.copy(source, target)
        added.append(target)

    def restore() -> None:
        for target in added:
            os.unlink(target)
        for target in aside:
            os.replace(target + ".aside", target)

    return set(added), restore


@pytest.mark.parametrize("fmt", KEY_KINDS)
def test_dir_package_members_swapped_in_after_the_signature_check_are_never_run(
        tmp_path, monkeypatch, fmt):
    """Once every member of a signed dir package was opened, a second process renames a
    foreign package's files into the folder (consistent: its own checksums hold) and, once
    they were opened, the signed ones back before any `stat`. Main hashed each member by
    path for the signature, then mapped them by path again: it ran the foreign weights."""
    signed = write_mlp(tmp_path / "signed.rlx", seed=0)
    folder = _dir_package(tmp_path / "pkg", signed)
    other = _dir_package(tmp_path / "other", write_mlp(tmp_path / "foreign.rlx", seed=1))
    public = signed_by(folder, tmp_path, fmt)
    members = {os.path.join(folder, name) for name in _files(folder)}
    real_open, opened, swap = os.open, [], {"pending": set(), "restore": None}

    def swapping_open(path, flags, *args, **kwargs):
        name = os.fspath(path)
        if name.startswith(folder + os.sep):
            if swap["restore"] is None and members <= set(opened):
                swap["pending"], swap["restore"] = _swap_in(folder, other)
            opened.append(name)
        fd = real_open(path, flags, *args, **kwargs)
        if name in swap["pending"]:
            swap["pending"].discard(name)
            if not swap["pending"]:
                swap["restore"]()
        return fd

    monkeypatch.setattr(os, "open", swapping_open)
    model = rlx.load(folder, engine="numpy", trusted_keys=[public])
    assert_runs(model, signed.oracle)
    assert sorted(opened) == sorted(members)  # each member opened once, for good


# -- break 1: the prepacked model saved from the path, not from the checked bytes ----------
def _swap_during_save(monkeypatch, signed, foreign) -> None:
    """Rename the foreign file over the path while onnxruntime saves its prepacked model,
    and the signed one back after: what a second process did to main 6 times in 60."""
    import onnxruntime as ort

    real = ort.InferenceSession

    def session(model, options=None, *args, **kwargs):
        if options is None or not options.optimized_model_filepath:
            return real(model, options, *args, **kwargs)
        aside = signed.path.with_name("signed.aside")
        os.replace(signed.path, aside)
        shutil.copy(foreign.path, signed.path)
        try:
            return real(model, options, *args, **kwargs)
        finally:
            os.replace(aside, signed.path)

    monkeypatch.setattr(ort, "InferenceSession", session)


def test_the_prepacked_model_is_saved_from_the_signed_bytes(pair, tmp_path, monkeypatch):
    require("onnxruntime")
    signed, foreign, public = pair
    cache = tmp_path / "cache"
    _swap_during_save(monkeypatch, signed, foreign)
    try:
        first = rlx.load(signed.path, engine="onnxruntime", trusted_keys=[public],
                         cache_dir=cache, prepack="mapped")
        assert_runs(first, signed.oracle)
    except RlxError:
        pass  # refused: within the contract, as long as nothing foreign was cached
    monkeypatch.undo()
    later = rlx.load(signed.path, engine="onnxruntime", trusted_keys=[public],
                     cache_dir=cache, prepack="mapped")
    assert later.runner.cached is not None  # it ran from the cache the attack wrote to
    assert_runs(later, signed.oracle)


# -- break 8: the file moved away once it was checked --------------------------------------
def _move_after_open(monkeypatch, path) -> None:
    """The file is moved out of its folder as soon as rlx has opened and checked it."""
    from rlx.artifact import open as opening

    real = opening.open_artifact

    def open_then_move(*args, **kwargs):
        file = real(*args, **kwargs)
        os.replace(path, path.with_name("moved-away.bin"))
        return file

    monkeypatch.setattr(opening, "open_artifact", open_then_move)


@pytest.mark.parametrize("prepack", PREPACKS)
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_onnxruntime_runs_a_file_moved_away_after_it_was_checked(tmp_path, monkeypatch,
                                                                  prepack, encrypted):
    """Main: onnxruntime's `Fail: External data path ... does not exist`, every mode."""
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "model.rlx", password="pw" if encrypted else None)
    _move_after_open(monkeypatch, mlp.path)
    model = rlx.load(mlp.path, engine="onnxruntime", cache_dir=tmp_path / "cache",
                     prepack=prepack, password="pw" if encrypted else None)
    assert not mlp.path.exists()
    assert_runs(model, mlp.oracle)


@pytest.mark.parametrize("engine", ["auto", "openvino"])
def test_every_engine_and_auto_run_a_file_moved_away_after_it_was_checked(
        tmp_path, monkeypatch, engine):
    """Main: `FileNotFoundError` from auto's cache key (the artifact hashed by path)."""
    require("onnxruntime")
    if engine == "openvino":
        require("openvino")
    mlp = write_mlp(tmp_path / "model.rlx")
    _move_after_open(monkeypatch, mlp.path)
    model = rlx.load(mlp.path, engine=engine, cache_dir=tmp_path / "cache")
    assert_runs(model, mlp.oracle)


# -- break 7: a header whose inputs disagree with its graph --------------------------------
@pytest.mark.parametrize("lie", ["dims", "name", "dtype", "extra"])
def test_a_header_io_that_disagrees_with_the_graph_is_refused(tmp_path, lie):
    """Main read it: the cold load ran, and every warm load took the header's inputs and
    failed with onnxruntime's `InvalidArgument` or refused feeds the cold load took."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 128)).astype(np.float32)
    b1 = rng.standard_normal(128).astype(np.float32)
    w2 = rng.standard_normal((128, 10)).astype(np.float32)
    file = RlxFile.from_baked(mlp_graph(w1, b1, w2), [])
    io = file.meta.inputs[0]
    file.meta.inputs = {
        "dims": [RlxIo(io.name, ("batch", 32), io.dtype)],
        "name": [RlxIo("y", io.shape, io.dtype)],
        "dtype": [RlxIo(io.name, io.shape, "f64")],
        "extra": [io, RlxIo("z", (1,), io.dtype)],
    }[lie]
    path = tmp_path / "lying.rlx"
    write_rlx(path, file)
    with pytest.raises(ArtifactError, match="meta.inputs disagree with the graph") as err:
        rlx.load(path, engine="numpy")
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_warm_load_gives_the_cold_loads_inputs_checks_and_results(tmp_path):
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "model.rlx")
    cache = tmp_path / "cache"
    cold = rlx.load(mlp.path, engine="onnxruntime", cache_dir=cache)
    warm = rlx.load(mlp.path, engine="onnxruntime", cache_dir=cache)
    assert warm._file is None and cold._file is not None  # it was the header-only load
    assert warm.inputs == cold.inputs and warm.outputs == cold.outputs
    assert_runs(warm, mlp.oracle)
    for bad in ({"x": np.ones((2, 63), np.float32)}, {"y": np.ones((2, 64), np.float32)}):
        messages = []
        for model in (cold, warm):
            with pytest.raises(RlxError) as err:
                model.run(bad)
            messages.append(str(err.value))
        assert messages[0] == messages[1]


# -- break 11: a damaged engines.json ------------------------------------------------------
def _damage_entries(cache, how) -> None:
    path = cache / "engines.json"
    if how == "nested":
        path.write_text("[" * 200_000 + "]" * 200_000)
        return
    data = json.loads(path.read_text())
    for entry in data.values():
        entry.update({"wrong-types": {"measured_ms": [1.0, 2.0]},
                      "engine-not-text": {"engine": ["onnxruntime"]},
                      "entry-not-object": {}}[how])
    if how == "entry-not-object":
        data = dict.fromkeys(data, "onnxruntime")
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["nested", "wrong-types", "engine-not-text",
                                 "entry-not-object"])
def test_a_damaged_engine_cache_is_a_miss_that_is_rebuilt(tmp_path, monkeypatch, how):
    """Main: `RecursionError` (nested) and `AttributeError` (wrong field types)."""
    from rlx.engines import auto

    monkeypatch.setattr(auto, "_measure", lambda runners, f, o, budget: {
        name: 0.001 if name == "numpy" else 1.0 for name in runners})
    monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)  # a busy machine's builds leave all in
    mlp = write_mlp(tmp_path / "model.rlx")
    cache = tmp_path / "cache"
    assert rlx.load(mlp.path, cache_dir=cache).engine == "numpy"
    _damage_entries(cache, how)
    model = rlx.load(mlp.path, cache_dir=cache)
    assert model.engine == "numpy"
    assert_runs(model, mlp.oracle)
    rebuilt = json.loads((cache / "engines.json").read_text())
    assert [e["engine"] for e in rebuilt.values() if isinstance(e, dict)
            and isinstance(e.get("measured_ms"), dict)] == ["numpy"]


@pytest.mark.parametrize("damage", ["manifest", "weights", "foreign"])
def test_a_damaged_or_foreign_prepacked_model_is_rebuilt(tmp_path, damage):
    """Entries are checked on use: a saved model whose files differ from its manifest, or
    whose manifest names other content, is never run."""
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "model.rlx")
    other = write_mlp(tmp_path / "other.rlx", seed=3)
    cache = tmp_path / "cache"
    folder = rlx.load(mlp.path, engine="onnxruntime", cache_dir=cache).runner.cached
    other_folder = rlx.load(other.path, engine="onnxruntime", cache_dir=cache).runner.cached
    if damage == "manifest":
        (folder / "rlx-saved.json").write_text("[" * 10_000)
    elif damage == "weights":
        data = bytearray((folder / "model.data").read_bytes())
        data[100] ^= 0x40
        (folder / "model.data").write_bytes(bytes(data))
    else:  # the other model's saved entry, whole, under this model's key
        shutil.rmtree(folder)
        shutil.copytree(other_folder, folder)
    for _ in range(2):  # the warm load refuses it, the full load rebuilds it
        assert_runs(rlx.load(mlp.path, engine="onnxruntime", cache_dir=cache), mlp.oracle)
