"""Where an engine keeps what it saves of a model in the user's cache directory
(onnxruntime: its optimised, prepacked copy, `model.onnx` + `model.data`), and how an entry
proves itself before it is used.

The key names everything the saved files depend on: the artifact's validated content
(`RlxFile.origin.key`: its header checksum, which covers every blob's, and the signed
statement's SHA-256 when a signature was checked), the machine (prepacked layouts follow
the CPU's kernels), the engine's install, rlx's version (the export), `REVISION` (what rlx
asks the engine to optimise, e.g. the onnxruntime fusions it leaves off) and anything else
the engine compiles for (`extra`). Anything changing gives a new folder, never a stale one.

Each folder holds a manifest written last, before the folder is renamed into place: the
content key and the XXH3 of every file saved. An entry is used only when its manifest
parses, names the key asked for and every file hashes as listed; anything else (missing,
damaged, foreign, unreadable) is a miss that the caller rebuilds.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from rlx.artifact.layout import checksum
from rlx.engines.fingerprint import machine_id
from rlx.engines.registry import engine_fingerprints
from rlx.errors import RlxError
from rlx.safeio import JsonLimits, load_json, map_file, read_regular
from rlx.version import __version__

__all__ = ["MANIFEST_FILE", "MODEL_FILE", "WEIGHTS_FILE", "REVISION", "check_saved",
           "save_manifest", "saved_folder"]

MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "model.data"
MANIFEST_FILE = "rlx-saved.json"
_MAX_MANIFEST = 64 << 10
REVISION = "3"
"""Bumped when what rlx gives or asks an engine while saving changes within one rlx version
(2: onnxruntime's SkipLayerNormFusion off, `rlx.engines.onnxruntime_engine.SLOW_FUSIONS`,
and int8 MatMuls' bias Adds folded, `rlx.onnx.ort_fusions`; 3: a Softmax over a middle
axis exported over a rank-3 view, `rlx.onnx.export_ops`)."""


def saved_folder(cache_dir: Path, key: str, engine: str, *extra: str) -> Path:
    """The folder of the entry for the content `key` (`RlxFile.origin.key`)."""
    parts = [key, machine_id(), engine_fingerprints([engine])[engine],
             f"rlx={__version__}", f"revision={REVISION}", *extra]
    return cache_dir / engine / hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def save_manifest(folder: Path, key: str) -> None:
    """Record `key` and the checksum of every file now in `folder` (call it last)."""
    files = {name: _file_checksum(folder / name) for name in sorted(os.listdir(folder))
             if name != MANIFEST_FILE}
    (folder / MANIFEST_FILE).write_text(json.dumps({"key": key, "files": files}))


def check_saved(folder: Path, key: str) -> str | None:
    """None when the entry in `folder` is whole and made from the content `key`; else what
    is wrong with it ("missing" when there is none)."""
    manifest = folder / MANIFEST_FILE
    if not os.path.lexists(manifest):
        return "missing"
    try:
        data = load_json(read_regular(manifest, _Damaged, limit=_MAX_MANIFEST), _Damaged,
                         str(manifest), JsonLimits(max_depth=4))
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict) \
                or MODEL_FILE not in data["files"]:
            return "damaged (its manifest is malformed)"
        if data.get("key") != key:
            return "foreign (made from other content)"
        for name, want in data["files"].items():
            if name not in (MODEL_FILE, WEIGHTS_FILE) or _file_checksum(folder / name) != want:
                return f"damaged ({str(name)[:40]} differs from what was saved)"
    except RlxError as err:
        return f"unreadable ({err})"
    return None


def _file_checksum(path: Path) -> str:
    mapped = map_file(path, _Damaged)
    return checksum(memoryview(mapped.buffer))


class _Damaged(RlxError):
    """A cache file that cannot be read as saved (never seen by callers)."""
