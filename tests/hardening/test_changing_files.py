"""Mapped inputs that another process truncates or rewrites while rlx holds them
(docs/reliability.md, "Files that change underneath").

Each case runs a reader in a child process (a SIGBUS there shows as its death, not as
pytest's): it opens a file, lets a real second process truncate it or `cp` another file
over it, then uses everything it loaded. The child must survive, and what it computes
must be what the file held when it was opened (rlx kept those bytes), with the change
noticed (`MappedFile.changed`, a warning in the log).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import save, save_file

from rlx.errors import WeightError
from rlx.safeio import map_file
from tests.hardening import seeds

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import hashlib, json, logging, subprocess, sys, threading
import numpy as np

kind, path, action, other, when, in_thread = sys.argv[1:7]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

def load():
    if kind in ("rlx", "rlxp"):
        from rlx.artifact import open_artifact
        return open_artifact(path, verify="lazy")
    from rlx.weights import load_weights
    return load_weights(path)

def use(loaded):
    digest = hashlib.sha256()
    if kind in ("rlx", "rlxp"):
        from rlx.runtime import Session
        from tests.hardening.harness import feeds_for
        compiled = Session().compile(loaded.into_runtime_graph())
        for out in compiled.run(feeds_for(compiled.input_shapes)):
            digest.update(np.ascontiguousarray(out).tobytes())
    else:
        for name in sorted(loaded.tensors):
            digest.update(name.encode() + np.ascontiguousarray(loaded.tensors[name]).tobytes())
    return digest.hexdigest()

def change():
    if action == "truncate":
        code = f"open({path!r}, 'r+b').truncate(0)"
    elif action == "shrink":
        code = f"import os; os.truncate({path!r}, 64)"
    else:  # cp: opens the destination with O_TRUNC, then writes the other file's bytes
        code = None
    if code is None:
        subprocess.run(["cp", other, path], check=True)
    else:
        subprocess.run([sys.executable, "-c", code], check=True)

box = {}
if in_thread == "1":
    worker = threading.Thread(target=lambda: box.update(loaded=load()))
    worker.start(); worker.join()
    loaded = box["loaded"]
else:
    loaded = load()
before = use(loaded) if when == "after-use" else None
change()
after = use(loaded)
print(json.dumps({"before": before, "after": after}))
"""


def reference_digest(kind: str, path: Path) -> str:
    """What the file computes when nothing changes (same code, in its own process)."""
    result = run_child(kind, path, "none", path, "before-use", False)
    return json.loads(result.stdout)["after"]


def run_child(kind, path, action, other, when, in_thread) -> subprocess.CompletedProcess:
    code = CHILD if action != "none" else CHILD.replace("change()\n", "")
    return subprocess.run([sys.executable, "-c", code, kind, str(path), action, str(other),
                           when, "1" if in_thread else "0"], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def rlx_bytes() -> bytes:
    return seeds.artifacts()["mlp-exact-duplex"]


def safetensors_bytes() -> bytes:
    return save({"a": np.arange(4096, dtype=np.float32),
                 "b": np.linspace(0, 1, 1000).astype(np.float16)})


def npy_bytes() -> bytes:
    out = io.BytesIO()
    np.save(out, np.arange(50_000, dtype=np.float32).reshape(250, 200))
    return out.getvalue()


def gguf_bytes(tmp: Path) -> bytes:
    path = tmp / "w.gguf"
    writer = gguf.GGUFWriter(str(path), "x")
    writer.add_tensor("t", np.arange(8192, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


MAKERS = {"rlx": lambda tmp: rlx_bytes(), "safetensors": lambda tmp: safetensors_bytes(),
          "npy": lambda tmp: npy_bytes(), "gguf": gguf_bytes,
          "rlxp": lambda tmp: seeds.rlxp_packages()["exact-flat"],
          "dduf": lambda tmp: seeds.dduf_files()["one"]}


def files(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """The input, and a same-size file whose data bytes differ (what `cp` puts over it)."""
    data = MAKERS[kind](tmp_path)
    path = tmp_path / f"model.{kind}"
    path.write_bytes(data)
    changed = bytearray(data)
    for i in range(len(changed) - 32, len(changed)):  # the data of the last tensor/blob
        changed[i] ^= 0x5A
    other = tmp_path / f"other.{kind}"
    other.write_bytes(bytes(changed))
    return path, other


@pytest.mark.slow
@pytest.mark.parametrize("action", ["truncate", "shrink", "cp"])
@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_changed_input_neither_kills_nor_changes_the_reader(tmp_path, kind, action):
    path, other = files(tmp_path, kind)
    want = reference_digest(kind, path)
    path.write_bytes(path.read_bytes())  # the reference child has let go of it
    result = run_child(kind, path, action, other, "before-use", False)
    assert result.returncode == 0, f"reader died ({result.returncode}): {result.stderr[-800:]}"
    assert json.loads(result.stdout)["after"] == want
    assert "changed on disk" in result.stderr  # noticed, and said so


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rlx", "safetensors"])
def test_a_change_after_first_use_keeps_the_results(tmp_path, kind):
    path, other = files(tmp_path, kind)
    result = run_child(kind, path, "cp", other, "after-use", False)
    assert result.returncode == 0, result.stderr[-800:]
    out = json.loads(result.stdout)
    assert out["before"] == out["after"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rlx", "npy"])
def test_a_file_opened_off_the_main_thread_is_a_private_copy(tmp_path, kind):
    """No signal handler can be installed off the main thread (before one was): the file
    is read instead of mapped, so a truncation cannot reach it either."""
    path, other = files(tmp_path, kind)
    result = run_child(kind, path, "truncate", other, "before-use", True)
    assert result.returncode == 0, result.stderr[-800:]
    assert json.loads(result.stdout)["after"] is not None


def test_a_file_that_changes_while_it_is_read_is_refused(tmp_path, monkeypatch):
    """The copying path checks the file's identity before and after its read."""
    from rlx.safeio import files as safe_files
    from rlx.safeio import mapping

    path = tmp_path / "w.bin"
    path.write_bytes(bytes(1 << 16))
    monkeypatch.setattr(mapping, "_take_lease", lambda fd: False)
    real_pread = safe_files.os.pread

    def pread_then_append(fd, n, offset):
        data = real_pread(fd, n, offset)
        with open(path, "ab") as f:
            f.write(b"more")
        return data

    monkeypatch.setattr(safe_files.os, "pread", pread_then_append)
    with pytest.raises(WeightError, match="changed while it was read"):
        map_file(path, WeightError)


def test_a_leased_map_is_released_with_its_buffer(tmp_path):
    """The lease (and its descriptor) lives exactly as long as the map."""
    import gc

    from rlx.safeio import mapping

    path = tmp_path / "w.bin"
    path.write_bytes(bytes(4096))
    mapped = map_file(path, WeightError)
    assert mapped.leased
    lease = mapped.lease
    del mapped
    gc.collect()
    assert lease.fd == -1 and lease not in mapping._leases
    save_file({"a": np.zeros(4, np.float32)}, str(path))  # a writer is not held up now


ENGINE_CHILD = r"""
import hashlib, json, logging, subprocess, sys
import numpy as np
import rlx

path, action, cache, prepack = sys.argv[1:5]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
model = rlx.load(path, engine="onnxruntime", cache_dir=cache, prepack=prepack)
x = {"x": np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)}
def digest():
    return hashlib.sha256(b"".join(np.ascontiguousarray(o).tobytes()
                                   for o in model.run(x))).hexdigest()
before = digest()
if action == "truncate":
    subprocess.run([sys.executable, "-c", f"open({path!r}, 'r+b').truncate(0)"], check=True)
after = digest()
print(json.dumps({"before": before, "after": after}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("prepack", ["mapped", "heap", "off"])
def test_a_truncated_file_neither_kills_nor_changes_the_onnxruntime_engine(tmp_path, prepack):
    """onnxruntime runs on rlx's own leased arrays (or, prepacked, on its saved copy in the
    cache, which a later load finds from the header alone): a `.rlx` truncated under it
    changes nothing it computes."""
    pytest.importorskip("onnxruntime")

    from tests.engines.conftest import write_mlp

    path = write_mlp(tmp_path / "mlp.rlx", k=256, hidden=2048, n=256).path

    def child(action: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", ENGINE_CHILD, str(path), action,
                               str(tmp_path / "cache"), prepack], capture_output=True,
                              text=True, cwd=ROOT, timeout=600)

    want = json.loads(child("none").stdout)["after"]
    result = child("truncate")
    assert result.returncode == 0, f"engine died ({result.returncode}): {result.stderr[-800:]}"
    out = json.loads(result.stdout)
    assert out["before"] == out["after"] == want
    if prepack != "mapped":  # rlx's map of the file noticed; a warm load holds no map
        assert "changed on disk" in result.stderr
