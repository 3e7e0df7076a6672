"""Reading files that someone else made: bounded JSON, regular files only, stable mappings.

Shared by every reader of untrusted bytes (`rlx.artifact`, `rlx.weights`, the ONNX
frontend); it imports nothing of rlx but `rlx.errors`, so any layer may use it.
"""

from __future__ import annotations

from rlx.safeio.errors import detached
from rlx.safeio.files import (
    SMALL_FILE_BYTES,
    FileIdentity,
    open_regular,
    read_fd,
    read_regular,
    read_small_text,
)
from rlx.safeio.json_scan import JsonLimits, load_json
from rlx.safeio.mapping import (
    MappedFile,
    in_leased_map,
    map_fd,
    map_file,
    map_with_file,
    read_from_file,
)

__all__ = ["SMALL_FILE_BYTES", "FileIdentity", "JsonLimits", "MappedFile", "detached",
           "in_leased_map", "load_json", "map_fd", "map_file", "map_with_file", "open_regular",
           "read_fd", "read_from_file", "read_regular", "read_small_text"]
