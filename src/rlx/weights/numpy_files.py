"""`.npy` and `.npz` readers: `np.load` with pickles refused, native dtypes kept.

A `.npy` file is one tensor named after the file's stem, memory-mapped; an `.npz` archive
holds one tensor per member, named like the member (np.savez's keyword), read into memory
(zip members cannot be mapped).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from rlx.errors import WeightError
from rlx.weights.source import SourceTensors, check_dense, reading

__all__ = ["read_npy", "read_npz"]

# What np.load raises on a damaged or pickled file (object arrays: ValueError).
_LOAD_ERRORS = (ValueError, EOFError, zipfile.BadZipFile)


def read_npy(path: Path) -> SourceTensors:
    with reading(path, ".npy", *_LOAD_ERRORS):
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    if not isinstance(array, np.ndarray):
        array.close()
        raise WeightError(f"{path} is an .npz archive, not an .npy file")
    return SourceTensors(dense={path.stem: check_dense(array.view(np.ndarray), path.stem, path)})


def read_npz(path: Path) -> SourceTensors:
    with reading(path, ".npz", *_LOAD_ERRORS):
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise WeightError(f"{path} is an .npy file, not an .npz archive")
        with archive:
            dense = {name: check_dense(archive[name], name, path) for name in archive.files}
    return SourceTensors(dense=dense)
