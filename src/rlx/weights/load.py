"""`load_weights`: a weights path -> `WeightBundle`, with the load policy applied.

A file is read by its extension (.safetensors, .npz, .npy, .gguf); a directory is the union of
the weight files directly inside it (e.g. sharded safetensors), a name in two files being an
error. Readers only map and index; the verdict then decides about packed tensors: GO decodes
them into `tensors` as float32 (a large one deferred: `rlx.deferred.Computed`, decoded from
the file each time it is read, so a bundle never holds every decoded tensor), NO-GO keeps
them in `packed`. Dense tensors keep their native dtype either way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlx.deferred import Payload, compute, defer, materialize
from rlx.errors import WeightError
from rlx.weights.bundle import LoadedWeight, WeightBundle
from rlx.weights.dduf import load_dduf
from rlx.weights.gguf_file import RUNNABLE_PACKS, decode_packed, read_gguf
from rlx.weights.mlx_folder import mlx_quantization, split_mlx_packs
from rlx.weights.numpy_files import read_npy, read_npz
from rlx.weights.policy import (
    F32FirstVerdict,
    WeightLoadPolicy,
    WeightPathKind,
    WeightSourceInfo,
    f32_first_verdict,
)
from rlx.weights.safetensors_file import read_safetensors
from rlx.weights.source import SourceTensors

__all__ = ["load_weights", "load_weights_f32"]

log = logging.getLogger(__name__)

Reader = Callable[[Path], SourceTensors]
_READERS: dict[str, tuple[WeightPathKind, Reader]] = {
    ".safetensors": (WeightPathKind.SAFETENSORS, read_safetensors),
    ".npz": (WeightPathKind.NPZ, read_npz),
    ".npy": (WeightPathKind.NPY, read_npy),
    ".gguf": (WeightPathKind.GGUF, read_gguf),
}
_EXPECTED = ".safetensors, .npz, .npy, .gguf or .dduf"


def load_weights(path: str | os.PathLike[str],
                 policy: WeightLoadPolicy | str = WeightLoadPolicy.F32_FIRST,
                 opts: Any = None) -> WeightBundle:
    """Load a weights file or folder; `opts` (a `BakeOptions`) feeds the verdict."""
    path = Path(path)
    if isinstance(policy, str):
        policy = WeightLoadPolicy.parse(policy)
    folder = path if path.is_dir() else path.parent
    quant = None
    if path.is_dir() or path.suffix.lower() == ".safetensors":
        quant = mlx_quantization(folder)
    if quant is not None:  # an MLX model folder (a .safetensors in one loads the folder)
        return _load_mlx(folder, quant, policy, opts)
    if path.suffix.lower() == ".dduf" and path.is_file():
        return load_dduf(path, policy, opts)
    if path.is_dir():
        kind, source = WeightPathKind.DIRECTORY, _read_dir(path)
    else:
        kind, reader = _reader_for(path)
        source = reader(path)
    info = WeightSourceInfo(bool(source.packs), source.has_native_half, kind)
    verdict = f32_first_verdict(policy, info, opts)
    log.info("f32-first %s", verdict)
    tensors, packed = _resolve(source, verdict, path)
    log.info("loaded %d dense + %d packed tensors from %s", len(tensors), len(packed), path)
    return WeightBundle(tensors, packed, str(path), verdict, info, frozenset(source.bt))


def _load_mlx(folder: Path, quant: dict, policy: WeightLoadPolicy, opts: Any) -> WeightBundle:
    source = _read_dir(folder)
    if source.packs:
        raise WeightError(f"MLX folder {folder} also holds GGUF tensors "
                          f"({source.packs[0].name!r}); keep them apart")
    packs = split_mlx_packs(source, quant, folder)
    info = WeightSourceInfo(bool(packs.rows), source.has_native_half, WeightPathKind.MLX)
    verdict = f32_first_verdict(policy, info, opts)
    log.info("f32-first %s", verdict)
    tensors: dict[str, Payload] = dict(source.dense)
    if verdict.go:
        tensors.update(packs.decoded())
        packed: list[LoadedWeight] = []
    else:
        packed = packs.rows
    log.info("loaded %d dense + %d packed tensors from MLX folder %s", len(tensors),
             len(packed), folder)
    return WeightBundle(tensors, packed, str(folder), verdict, info)


def load_weights_f32(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The f32-first bundle's tensors as arrays: packs decoded to float32, other tensors
    native (views of the file where they can be)."""
    return {name: materialize(value) for name, value in load_weights(path).tensors.items()}


def _reader_for(path: Path) -> tuple[WeightPathKind, Reader]:
    if not path.exists():
        raise WeightError(f"weights file {path} does not exist")
    if not path.is_file():
        raise WeightError(f"weights path {path} is not a file or directory")
    if not path.suffix:
        raise WeightError(f"weights path has no extension: {path}; expected {_EXPECTED}")
    found = _READERS.get(path.suffix.lower())
    if found is None:
        raise WeightError(
            f"unsupported weights extension {path.suffix} on {path}; expected {_EXPECTED}")
    return found


def _read_dir(path: Path) -> SourceTensors:
    """Every weight file directly in `path`, in name order, merged; names must be unique."""
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _READERS)
    if not files:
        raise WeightError(f"no weights files ({_EXPECTED}) in directory {path}")
    merged = SourceTensors()
    origin: dict[str, Path] = {}
    for file in files:
        part = _READERS[file.suffix.lower()][1](file)
        for name in part.names():
            if name in origin:
                raise WeightError(f"tensor {name!r} is in both {origin[name]} and {file}")
            origin[name] = file
        merged.dense.update(part.dense)
        merged.packs.extend(part.packs)
        merged.bt.update(part.bt)
    return merged


def _decoded(name: str, shape: tuple[int, ...], encoding: str, path: Path,
             data: np.ndarray) -> np.ndarray:
    return decode_packed(LoadedWeight(name, shape, encoding, data), path)


def _resolve(source: SourceTensors, verdict: F32FirstVerdict,
             path: Path) -> tuple[dict[str, Payload], list[LoadedWeight]]:
    """(tensors, packed) under the verdict; a name ends up in exactly one of them."""
    if verdict.go:
        tensors: dict[str, Payload] = dict(source.dense)
        tensors.update((w.name, compute(_decoded, (defer(w.data),),
                                        (w.name, w.shape, w.encoding, path), w.shape,
                                        np.float32)) for w in source.packs)
        return tensors, []
    foreign = sorted({w.encoding for w in source.packs if w.encoding not in RUNNABLE_PACKS})
    if foreign:
        raise WeightError(
            f"{path}: tensors of type {', '.join(foreign)} cannot be kept packed (rlx runs "
            f"{', '.join(RUNNABLE_PACKS)}); use --weights-policy f32 to decode them")
    return dict(source.dense), list(source.packs)
