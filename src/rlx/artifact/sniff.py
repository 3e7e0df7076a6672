"""What a file that is not an artifact is, from its first bytes: for the hint a user needs
("that is an ONNX model: bake it first") instead of "bad magic"."""

from __future__ import annotations

import struct

__all__ = ["foreign_format", "foreign_hint"]

# ModelProto's first field is ir_version (field 1, varint: tag 0x08, a small value), then a
# length-delimited or varint field of ModelProto (producer, domain, graph, opset_import)
_ONNX_NEXT_TAGS = {0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2}


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
        return "an ONNX model"
    if name.lower().endswith(".onnx"):
        return "an ONNX model"
    return None


def foreign_hint(head: bytes, name: str = "") -> str:
    """`; it is <format>: <what to do>` for a known format, else ""."""
    kind = foreign_format(head, name)
    if kind is None:
        return ""
    if kind == "an ONNX model":
        todo = f"bake it first (rlx-bake bake {name or 'MODEL.onnx'} -o model.rlx)"
    else:
        todo = "weights go to `rlx-bake bake MODEL --weights FILE`"
    return f"; it looks like {kind}, not an .rlx artifact: {todo}"
