"""Named attacks on MLX folders and DDUF bundles, each judged by the fuzz contract
(`harness.check_case`: only `RlxError`s, CPU time and traced memory bounded by the input)
and each required to be refused with a `WeightError`. The mutated cases of both targets
run in test_fuzz.py; these are the lies a mutator reaches only by luck.

Found here: a dense `model_index.json` (12 MB of `[],`) cost a DDUF read 282 MB of Python
objects, and the same in an MLX `config.json` 295 MB: both are now bounded by
`safeio.load_json` before parsing, as every other JSON rlx reads.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from collections.abc import Callable

import numpy as np
import pytest
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

from tests.hardening import harness, seeds

LOCAL, CENTRAL, END = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
DENSE = b"[" + b"[]," * (4 << 20) + b"[]]"  # 12 MiB of empty lists
DEEP = b"[" * 100_000 + b"]" * 100_000
JSON_ONLY = 8  # what a JSON lie may cost per input byte (no decoding)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    with harness.tracing():
        yield tmp_path_factory.mktemp("bundles")


def refused(target: str, case: bytes, workdir, multiple: int | None = None,
            may_read: bool = False) -> None:
    """Within the contract, and refused by every policy with a WeightError (or, `may_read`,
    read: a lie that changes nothing rlx uses)."""
    outcome = harness.check_case(harness.TARGETS[target], case, workdir)
    assert outcome.violation is None, (outcome.violation, outcome.detail)
    labels = outcome.signature.split(" ")
    assert labels and all("=WeightError@" in label or (may_read and label.endswith("=ok"))
                          for label in labels), outcome.signature
    if multiple is not None:
        assert outcome.peak <= harness.SLACK + multiple * len(case), outcome.peak


# -- raw zip surgery ------------------------------------------------------------------------
def _patch_all(data: bytes, signature: bytes, offset: int, fmt: str, value: int,
               which: int | None = None) -> bytes:
    """Set a field at `offset` of every (or the `which`-th) record with `signature`."""
    out, at, seen = bytearray(data), data.find(signature), 0
    while at >= 0:
        if which is None or seen == which:
            struct.pack_into(fmt, out, at + offset, value)
        seen += 1
        at = data.find(signature, at + 4)
    return bytes(out)


def _dduf(**changes: bytes | None) -> bytes:
    members = seeds.zip_members(seeds.dduf_files()["pipe"])
    for name, body in changes.items():
        name = name.replace("__", "/")
        if body is None:
            members.pop(name, None)
        else:
            members[name] = body
    return seeds.rezip(members, compressed=False)


def _pipe() -> bytes:
    return seeds.dduf_files()["pipe"]


def _duplicate_member() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive, pytest.warns(UserWarning):
        for body in (b"{}", b'{"unet": 1}'):
            archive.writestr("model_index.json", body)
    return out.getvalue()


def _overlapping() -> bytes:
    """Two central entries pointing at the same local header."""
    data = _pipe()
    first = struct.unpack_from("<I", data, data.find(CENTRAL) + 42)[0]
    return _patch_all(data, CENTRAL, 42, "<I", first, which=1)


def _local_name_differs() -> bytes:
    data = bytearray(_pipe())
    name_at = data.find(LOCAL) + 30
    data[name_at] ^= 0x20  # the local header names another file than the directory
    return bytes(data)


def _many_members() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("model_index.json", b"{}")
        for i in range((1 << 16) + 1):
            archive.writestr(f"{i}.txt", b"")
    return out.getvalue()


def _safetensors_lie(edit: Callable[[dict], None]) -> bytes:
    members = seeds.zip_members(_pipe())
    body = members["unet/model.safetensors"]
    length = int.from_bytes(body[:8], "little")
    header = json.loads(body[8:8 + length])
    edit(header)
    text = json.dumps(header).encode()
    members["unet/model.safetensors"] = len(text).to_bytes(8, "little") + text + \
        body[8 + length:]
    return seeds.rezip(members, compressed=False)


def _first(header: dict) -> dict:
    return header[min(k for k in header if k != "__metadata__")]


DDUF_ATTACKS: dict[str, Callable[[], bytes]] = {
    "index dense (12 MiB of [])": lambda: _dduf(**{"model_index.json": DENSE}),
    "index nested 100k deep": lambda: _dduf(**{"model_index.json": DEEP}),
    "index not an object": lambda: _dduf(**{"model_index.json": b"[1, 2]"}),
    "index missing": lambda: _dduf(**{"model_index.json": None}),
    "index not UTF-8": lambda: _dduf(**{"model_index.json": b'{"\xff": 1}'}),
    "folder not in the index": lambda: _dduf(**{"vae/config.json": b"{}"}),
    "two folder levels": lambda: _dduf(**{"unet/sub/config.json": b"{}"}),
    "name with ..": lambda: _dduf(**{"../config.json": b"{}"}),
    "absolute name": lambda: _dduf(**{"/config.json": b"{}"}),
    "backslash name": lambda: _dduf(**{"unet\\x.json": b"{}"}),
    "forbidden extension": lambda: _dduf(**{"unet/model.bin": b"x"}),
    "duplicate member": _duplicate_member,
    "deflated member": lambda: seeds.rezip(seeds.zip_members(_pipe()), compressed=True),
    "unknown compression method": lambda: _patch_all(
        _patch_all(_pipe(), LOCAL, 8, "<H", 99), CENTRAL, 10, "<H", 99),
    "encryption flag": lambda: _patch_all(_patch_all(_pipe(), LOCAL, 6, "<H", 1),
                                          CENTRAL, 8, "<H", 1),
    "data descriptor flag": lambda: _patch_all(_patch_all(_pipe(), LOCAL, 6, "<H", 8),
                                               CENTRAL, 8, "<H", 8),
    "overlapping members": _overlapping,
    "local header names another file": _local_name_differs,
    "size claims 4 GiB": lambda: _patch_all(_pipe(), CENTRAL, 24, "<I", 0xFFFFFFF0),
    "offset past the end": lambda: _patch_all(_pipe(), CENTRAL, 42, "<I", 0x7FFFFFFF,
                                              which=2),
    "directory count lies": lambda: _patch_all(_patch_all(_pipe(), END, 8, "<H", 0xFFFF),
                                               END, 10, "<H", 0xFFFF),
    "directory cut short": lambda: _pipe()[:-30],
    "65,537 members": _many_members,
    "safetensors header longer than its member": lambda: _dduf(**{
        "unet/model.safetensors": (1 << 20).to_bytes(8, "little") + b"{}"}),
    "safetensors offsets past the member": lambda: _safetensors_lie(
        lambda h: _first(h).update(data_offsets=[0, 1 << 40])),
    "safetensors shape claims 2^62 elements": lambda: _safetensors_lie(
        lambda h: _first(h).update(shape=[1 << 31, 1 << 31])),
    "safetensors unknown dtype": lambda: _safetensors_lie(
        lambda h: _first(h).update(dtype="Q4")),
}


HARMLESS = {"data descriptor flag", "directory count lies"}
"""Lies zipfile and rlx.stored_zip read past correctly: the central directory's sizes and
offsets are the ones used, and they are checked."""


@pytest.mark.parametrize("attack", DDUF_ATTACKS)
def test_dduf_attack_is_refused_within_the_contract(workdir, attack):
    refused("dduf", DDUF_ATTACKS[attack](), workdir,
            JSON_ONLY if attack.startswith("index") else None, attack in HARMLESS)


# -- MLX folders ----------------------------------------------------------------------------
def _mlx(config: dict | bytes | None = None, **arrays: np.ndarray | None) -> bytes:
    members = seeds.zip_members(seeds.mlx_folders()["affine"])
    if config is not None:
        members["config.json"] = config if isinstance(config, bytes) else \
            json.dumps(config).encode()
    if arrays:
        tensors = dict(load_safetensors(members["model.safetensors"]))
        for name, array in arrays.items():
            name = name.replace("__", ".")
            if array is None:
                tensors.pop(name)
            else:
                tensors[name] = array
        members["model.safetensors"] = save_safetensors(tensors)
    return seeds.rezip(members, compressed=False)


def _quant(**settings) -> dict:
    quant = json.loads(seeds.zip_members(seeds.mlx_folders()["affine"])["config.json"])
    quant["quantization"].update(settings)
    return quant


def _l1() -> dict[str, np.ndarray]:
    tensors = load_safetensors(seeds.zip_members(seeds.mlx_folders()["affine"])
                               ["model.safetensors"])
    return {k.split(".")[1]: v for k, v in tensors.items() if k.startswith("l1.")}


MLX_ATTACKS: dict[str, Callable[[], bytes]] = {
    "bits lie (8 for 4-bit codes)": lambda: _mlx(_quant(bits=8)),
    "bits lie (3 for 4-bit codes)": lambda: _mlx(_quant(bits=3)),
    "group size lie (64 for 32)": lambda: _mlx(_quant(group_size=64)),
    "group size lie (16 for 32)": lambda: _mlx(_quant(group_size=16)),
    "bits 0": lambda: _mlx(_quant(bits=0)),
    "bits -4": lambda: _mlx(_quant(bits=-4)),
    "bits 2^64": lambda: _mlx(_quant(bits=2**64)),
    "bits as text": lambda: _mlx(_quant(bits="4")),
    "bits 3.5": lambda: _mlx(_quant(bits=3.5)),
    "bits true": lambda: _mlx(_quant(bits=True)),
    "group size 0": lambda: _mlx(_quant(group_size=0)),
    "group size 2^40": lambda: _mlx(_quant(group_size=2**40)),
    "unknown mode": lambda: _mlx(_quant(mode="sideways")),
    "mxfp4 claimed for affine triples": lambda: _mlx(_quant(mode="mxfp4")),
    "per-layer override lies": lambda: _mlx(_quant(l1={"bits": 8, "group_size": 128})),
    "quantization a list": lambda: _mlx({"quantization": [4, 32]}),
    "config nested 100k deep": lambda: _mlx(b'{"quantization": {"bits": 4}, "x": ' + DEEP +
                                            b"}"),
    "config dense (12 MiB of [])": lambda: _mlx(
        b'{"quantization": {"bits": 4, "group_size": 32}, "x": ' + DENSE + b"}"),
    "config not an object": lambda: _mlx(b"[1]"),
    "config not JSON": lambda: _mlx(b'{"quantization": '),
    "codes one word short": lambda: _mlx(l1__weight=np.ascontiguousarray(
        _l1()["weight"][:, :-1])),
    "codes one row more": lambda: _mlx(l1__weight=np.concatenate(
        [_l1()["weight"], _l1()["weight"][:1]])),
    "codes flat": lambda: _mlx(l1__weight=_l1()["weight"].reshape(-1)),
    "codes as bytes": lambda: _mlx(l1__weight=_l1()["weight"].view(np.uint8)),
    "codes missing": lambda: _mlx(l1__weight=None),
    "scales one group short": lambda: _mlx(l1__scales=np.ascontiguousarray(
        _l1()["scales"][:, :-1])),
    "scales as int32": lambda: _mlx(l1__scales=_l1()["scales"].astype(np.int32)),
    "biases missing": lambda: _mlx(l1__biases=None),
    "biases of another shape": lambda: _mlx(l1__biases=_l1()["biases"][:1]),
}


@pytest.mark.parametrize("attack", MLX_ATTACKS)
def test_mlx_attack_is_refused_within_the_contract(workdir, attack):
    refused("mlx", MLX_ATTACKS[attack](), workdir,
            JSON_ONLY if attack.startswith(("config", "quantization")) else None)
