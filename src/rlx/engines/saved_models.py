"""Where an engine keeps what it saves of a model in the user's cache directory
(onnxruntime: its optimised, prepacked copy, `model.onnx` + `model.data`).

The key names everything the saved files depend on: the artifact (its checksum), the
machine (prepacked layouts follow the CPU's kernels), the engine's install, rlx's version
(the export) and anything else the engine compiles for (`extra`). Anything changing gives
a new folder, never a stale one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from rlx.engines.fingerprint import artifact_checksum, machine_id
from rlx.engines.registry import engine_fingerprints
from rlx.version import __version__

__all__ = ["MODEL_FILE", "WEIGHTS_FILE", "saved_folder"]

MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "model.data"


def saved_folder(cache_dir: Path, path: str, engine: str, *extra: str) -> Path:
    parts = [artifact_checksum(path), machine_id(), engine_fingerprints([engine])[engine],
             f"rlx={__version__}", *extra]
    return cache_dir / engine / hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]
