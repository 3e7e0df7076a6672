"""What a file that is not an artifact is, from its first bytes: for the hint a user needs
("that is an ONNX model: bake it first") instead of "bad magic"."""

from __future__ import annotations

import struct

__all__ = ["ARTIFACT", "ENCRYPTED_ARTIFACT", "ONNX_MODEL", "file_format", "foreign_format",
           "foreign_hint"]

ARTIFACT = "an .rlx artifact"
ENCRYPTED_ARTIFACT = "an encrypted .rlx artifact"
ONNX_MODEL = "an ONNX model"

# ModelProto's first field is ir_version (field 1, varint: tag 0x08, a small value), then a
# length-delimited or varint field of ModelProto (producer, domain, graph, opset_import)
_ONNX_NEXT_TAGS = {0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2}


def file_format(path: str) -> str | None:
    """What the file at `path` is, from its first bytes (`ARTIFACT`, `ONNX_MODEL`, "a GGUF
    file", ...), or None when it is none of the formats known here (or unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if head.startswith(b"RLXBAKE1"):
        return ARTIFACT
    if head.startswith(b"RLXENC01"):
        return ENCRYPTED_ARTIFACT
    return foreign_format(head, path)


def foreign_format(head: bytes, name: str = "") -> str | None:
    """A short description of a known non-artifact format, or None."""
    if head.startswith(b"GGUF"):
        return "a GGUF file"
    if head.startswith(b"\x93NUMPY"):
        return "a .npy array"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (an .npz?)"
    if len(head) >= 9 and head[8:9] == b"{":
        (size,) = struct.unpack_from("<Q", head)
        if 2 <= size < 100_000_000:
            return "a safetensors file"
    if len(head) >= 3 and head[0] == 0x08 and 1 <= head[1] <= 30 \
            and head[2] in _ONNX_NEXT_TAGS:
        return ONNX_MODEL
    if name.lower().endswith(".onnx"):
        return ONNX_MODEL
    return None


def foreign_hint(head: bytes, name: str = "") -> str:
    """`; it is <format>: <what to do>` for a known format, else ""."""
    kind = foreign_format(head, name)
    if kind is None:
        return ""
    if kind == ONNX_MODEL:
        todo = f"bake it first (rlx-bake bake {name or 'MODEL.onnx'} -o model.rlx)"
    else:
        todo = "weights go to `rlx-bake bake MODEL --weights FILE`"
    return f"; it looks like {kind}, not an .rlx artifact: {todo}"
