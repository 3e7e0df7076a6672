"""Where onnxruntime's prepacked copy of a model lives in the user's cache directory.

The key names everything the saved model depends on: the artifact (its checksum), the
machine (prepacked layouts follow the CPU's kernels), onnxruntime's install and rlx's
version (the export). Anything else changing gives a new folder, never a stale one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from rlx.engines.fingerprint import artifact_checksum, machine_id
from rlx.engines.registry import engine_fingerprints
from rlx.version import __version__

__all__ = ["MODEL_FILE", "WEIGHTS_FILE", "cache_folder", "cache_key"]

MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "model.data"


def cache_key(path: str) -> str:
    parts = [artifact_checksum(path), machine_id(),
             engine_fingerprints(["onnxruntime"])["onnxruntime"], f"rlx={__version__}"]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def cache_folder(cache_dir: Path, path: str) -> Path:
    return cache_dir / "onnxruntime" / cache_key(path)
