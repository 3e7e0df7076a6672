"""The same model written as every kind of artifact a signature can cover: a plain and an
encrypted `.rlx`, and a `.rlxp` package in each of its three containers."""

from __future__ import annotations

from pathlib import Path

from rlx import BakeOptions, bake
from rlx.artifact import write_rlx, write_rlxp
from tests.hardening import seeds

KINDS = {"rlx": "m.rlx", "rlx-encrypted": "e.rlx", "rlxp-flat": "m.rlxp",
         "rlxp-zip": "m.rlxp.zip", "rlxp-dir": "pkg"}
PASSWORD = "pw"


def small_model():
    """A baked MLP and its weights (seeds' MLP: small enough to flip every byte)."""
    graph, weights = seeds._mlp()
    return bake(graph, weights, BakeOptions())[0], weights


def write_every_kind(folder: Path, file) -> dict[str, Path]:
    """`file` written as every kind, unsigned; the paths by kind."""
    write_rlx(folder / KINDS["rlx"], file)
    write_rlx(folder / KINDS["rlx-encrypted"], file, password=PASSWORD, kdf=seeds.FAST_KDF,
              chunk_size=seeds.ENC_CHUNK)
    for kind, container in (("rlxp-flat", "flat"), ("rlxp-zip", "zip"), ("rlxp-dir", "dir")):
        write_rlxp(folder / KINDS[kind], file, container)
    return {kind: folder / name for kind, name in KINDS.items()}
