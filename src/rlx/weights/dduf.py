"""DDUF bundles (`.dduf`, diffusers' single-file format): a ZIP of STORE-d members - a root
`model_index.json`, component folders one level deep with their configs and safetensors.

The archive is validated like every rlx reader validates (rlx.stored_zip: STORE only, safe
names, local headers agreeing with the directory, no overlaps, sizes inside the file), plus
DDUF's own rules (those `huggingface_hub.read_dduf_file` applies): allowed extensions
(.json, .model, .safetensors, .txt), at most one folder level, `model_index.json` present,
an object naming every component folder. Each safetensors member is parsed and checked as a
safetensors file is, and its tensors are views of one memory map of the bundle.

Names: a tensor keeps its own name when no other member has one like it; when two members
share names (components of a pipeline often do: `conv_in.weight`), every tensor of the bundle
is named `<component>/<name>`. Under the policy's NO-GO (the reference's `auto` rule for a
DDUF with f16/bf16 tensors, or `packed`), tensors keep their native dtype; under GO, f16 and
bf16 tensors are widened to float32, as the reference decodes DDUF bundles.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from rlx.deferred import Payload, compute
from rlx.errors import WeightError
from rlx.safeio import load_json, map_with_file
from rlx.stored_zip import StoredMember, read_stored_zip
from rlx.weights.bundle import WeightBundle
from rlx.weights.policy import (
    WeightLoadPolicy,
    WeightPathKind,
    WeightSourceInfo,
    f32_first_verdict,
)
from rlx.weights.safetensors_file import (
    MAX_HEADER_BYTES,
    _check_metadata,
    _check_tiling,
    _entry,
    _read_header,
)
from rlx.weights.source import HALF_DTYPES, SourceTensors, reading

__all__ = ["load_dduf", "read_dduf"]

log = logging.getLogger(__name__)

ALLOWED_EXTENSIONS = (".json", ".model", ".safetensors", ".txt")
INDEX = "model_index.json"
_MAX_INDEX = 16 << 20


def _name_problem(name: str) -> str | None:
    if not name.endswith(ALLOWED_EXTENSIONS):
        return f"file type not allowed in DDUF (allowed: {', '.join(ALLOWED_EXTENSIONS)})"
    if name.count("/") > 1:
        return "DDUF allows one level of folders"
    return None


def read_dduf(path: Path) -> SourceTensors:
    """Every tensor of every safetensors member, in its native dtype, as map views."""
    with reading(path, "DDUF"), map_with_file(path, WeightError) as (mapped, f):  # leased
        members = read_stored_zip(f, len(mapped), str(path), WeightError, _name_problem)
        index = _index(f, members, path)
        tables = {name: _table(f, member, path) for name, member in members.items()
                  if name.endswith(".safetensors")}
    folders = {name.split("/")[0] for name in members if "/" in name}
    missing = sorted(folders - set(index))
    if missing:
        raise WeightError(f"corrupt DDUF file {path}: folder {missing[0]!r} is not in "
                          f"{INDEX}")
    data = np.frombuffer(mapped.buffer, np.uint8) if tables else np.empty(0, np.uint8)
    seen: dict[str, str] = {}
    clash = False
    for member, (_, entries) in tables.items():
        for entry in entries:
            clash = clash or entry.name in seen
            seen.setdefault(entry.name, member)
    source = SourceTensors()
    for member, (start, entries) in sorted(tables.items()):
        folder = member.rsplit("/", 1)[0] if "/" in member else ""
        for e in entries:
            name = f"{folder}/{e.name}" if clash and folder else e.name
            if name in source.dense:
                raise WeightError(f"DDUF file {path}: tensor {name!r} is in two members")
            source.dense[name] = data[start + e.begin:start + e.end].view(e.dtype).reshape(
                e.shape)
    return source


def _index(f, members: dict[str, StoredMember], path: Path) -> dict[str, Any]:
    member = members.get(INDEX)
    if member is None:
        raise WeightError(f"corrupt DDUF file {path}: no {INDEX} entry")
    if member.length > _MAX_INDEX:
        raise WeightError(f"corrupt DDUF file {path}: {INDEX} is over {_MAX_INDEX >> 20} MiB")
    f.seek(member.offset)
    # nesting and container count bounded by the member's size before parsing (a dense
    # 12 MB index once cost 282 MB of Python objects)
    index = load_json(f.read(member.length), WeightError, f"corrupt DDUF file {path}: {INDEX}")
    if not isinstance(index, dict):
        raise WeightError(f"corrupt DDUF file {path}: {INDEX} is not a JSON object")
    return index


def _table(f, member: StoredMember, path: Path) -> tuple[int, list]:
    """A safetensors member's header, checked as read_safetensors checks a file: (absolute
    start of its data section, entries)."""
    label = Path(f"{path}:{member.name}")
    f.seek(member.offset)
    head = f.read(min(member.length, 8))
    claimed = int.from_bytes(head, "little")
    if len(head) == 8 and claimed <= min(MAX_HEADER_BYTES, member.length - 8):
        head += f.read(claimed)  # _read_header refuses any other length before slicing
    header_len, header = _read_header(head, member.length, label)
    entries = [_entry(name, value, label) for name, value in header.items()
               if name != "__metadata__"]
    _check_metadata(header.get("__metadata__", {}), label)
    _check_tiling(entries, member.length - 8 - header_len, label)
    return member.offset + 8 + header_len, entries


def _widened(half: np.ndarray) -> np.ndarray:
    return half.astype(np.float32)


def load_dduf(path: Path, policy: WeightLoadPolicy, opts: Any = None) -> WeightBundle:
    source = read_dduf(path)
    info = WeightSourceInfo(False, source.has_native_half, WeightPathKind.DDUF)
    verdict = f32_first_verdict(policy, info, opts)
    log.info("f32-first %s", verdict)
    tensors: dict[str, Payload] = dict(source.dense)
    if verdict.go:  # widened when read if large (rlx.deferred): never all at once
        tensors = {k: compute(_widened, (v,), (), v.shape, np.float32, rowwise=True)
                   if v.dtype in HALF_DTYPES else v for k, v in tensors.items()}
    log.info("loaded %d tensors from DDUF bundle %s", len(tensors), path)
    return WeightBundle(tensors, [], str(path), verdict, info)
