"""MLX model folders: `config.json` with a `quantization` entry, and safetensors where each
quantized layer `<base>` is three tensors - `<base>.weight` (uint32 words of the codes,
`[N, K * bits / 32]`), `<base>.scales` and, for affine, `<base>.biases` (`[N, K / group]`).

The config's `quantization` holds the default `group_size`, `bits` and `mode` (affine when
absent; mxfp4/mxfp8/nvfp4 as MLX 0.32 writes them) and may override them per layer
(`"<base>": {...}`). Under the load policy's NO-GO the triples stay packed as rows
(`<base>.weight` with encoding `mlx_affine/<bits>/<group>` etc. and logical shape [N, K], its
scales and biases in their own dtype), which the bake binds to `DequantMatMul`; under GO
they are decoded to float32 `[N, K]` (the matrix `mlx.core.dequantize` returns). Every
other tensor stays dense in its own dtype.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rlx.codecs import MlxScheme, decode, decode_mlx
from rlx.deferred import Payload, compute, defer
from rlx.errors import RlxError, WeightError
from rlx.safeio import load_json, read_regular
from rlx.weights.bundle import LoadedWeight
from rlx.weights.source import SourceTensors

__all__ = ["mlx_quantization", "MlxPacks", "split_mlx_packs", "CONFIG_FILE"]

CONFIG_FILE = "config.json"
_MAX_CONFIG = 16 << 20
_SCALE_DTYPES = {np.dtype("<f4"): "f32", np.dtype("<f2"): "f16", np.dtype(np.uint8): "u8"}


def mlx_quantization(folder: Path) -> dict[str, Any] | None:
    """The folder's `config.json` quantization entry (`quantization`, or the
    `quantization_config` mlx-lm also writes), None when there is none."""
    config = folder / CONFIG_FILE
    if not config.is_file():
        return None
    # one descriptor, its size checked before reading; the JSON's nesting and container
    # count bounded by its size before a Python object is built (rlx.safeio)
    raw = read_regular(config, WeightError, limit=_MAX_CONFIG)
    body = load_json(raw, WeightError, f"MLX config {config}")
    if not isinstance(body, dict):
        raise WeightError(f"MLX config {config} is not a JSON object")
    quant = body.get("quantization", body.get("quantization_config"))
    if quant in (None, False):
        return None
    if not isinstance(quant, dict):
        raise WeightError(f"{config}: 'quantization' must be an object, got {quant!r}")
    return quant


class MlxPacks:
    """The quantized layers found in a folder's tensors: their schemes and the triples."""

    def __init__(self) -> None:
        self.rows: list[LoadedWeight] = []  # weight, scales(, biases) per layer, in order
        self.schemes: dict[str, MlxScheme] = {}  # "<base>.weight" -> scheme

    def decoded(self) -> dict[str, Payload]:
        """GO: every quantized layer's weight as float32 [N, K] (deferred when large: decoded
        each time it is read, `rlx.deferred`)."""
        by_name = {row.name: row for row in self.rows}
        out: dict[str, Payload] = {}
        for name, scheme in self.schemes.items():
            base = name.removesuffix(".weight")
            codes = by_name[name]
            parts = [_view(by_name[f"{base}.scales"])]
            if scheme.has_biases:
                parts.append(_view(by_name[f"{base}.biases"]))
            out[name] = compute(_decode_layer, (defer(codes.data), *parts),
                                (scheme, codes.shape), codes.shape, np.float32)
        return out


def _decode_layer(scheme: MlxScheme, shape: tuple[int, ...], codes: np.ndarray,
                  scales: np.ndarray, biases: np.ndarray | None = None) -> np.ndarray:
    return decode_mlx(scheme, codes, math.prod(shape), scales=scales,
                      biases=biases).reshape(shape)


def _view(row: LoadedWeight) -> np.ndarray:
    """A scales/biases row's values (a view of its bytes in their own dtype)."""
    if row.encoding == "u8":
        return row.data
    return decode(row.encoding, row.data)


def _layer_scheme(quant: dict[str, Any], base: str, where: str) -> MlxScheme:
    settings = dict(quant)
    override = quant.get(base)
    if isinstance(override, dict):
        settings.update(override)
    mode, bits, group = settings.get("mode", "affine"), settings.get("bits"), \
        settings.get("group_size")
    # a 0 is no "absent": MlxScheme.of would take it for MLX's default (bits 0 read as 4)
    if not isinstance(mode, str) or not all(v is None or (isinstance(v, int) and
                                                          not isinstance(v, bool) and v > 0)
                                            for v in (bits, group)):
        raise WeightError(f"{where}: quantization of {base!r} has bad mode/bits/group_size "
                          f"({mode!r}, {bits!r}, {group!r})")
    try:
        return MlxScheme.of(mode, bits, group)
    except RlxError as err:
        raise WeightError(f"{where}: layer {base!r}: {err}") from None


def split_mlx_packs(source: SourceTensors, quant: dict[str, Any], folder: Path) -> MlxPacks:
    """Move every quantized layer's triple out of `source.dense` into packs, each checked:
    uint32 codes, scales (and biases) of one row per output and one column per group."""
    packs = MlxPacks()
    for scales_name in sorted(n for n in source.dense if n.endswith(".scales")):
        base = scales_name.removesuffix(".scales")
        weight_name = f"{base}.weight"
        codes = source.dense.get(weight_name)
        scheme = _layer_scheme(quant, base, str(folder))
        scales = source.dense[scales_name]
        biases = source.dense.get(f"{base}.biases")
        where = f"{folder}: MLX layer {base!r} ({scheme.label})"
        if codes is None or codes.dtype != np.uint32 or codes.ndim != 2:
            raise WeightError(f"{where}: needs {weight_name} as 2-D uint32 codes, got "
                              f"{None if codes is None else f'{codes.dtype}{list(codes.shape)}'}")
        n, words = codes.shape
        k = words * 32 // scheme.bits
        if words * 32 % scheme.bits or k % scheme.group or scales.shape != (n, k // scheme.group):
            raise WeightError(f"{where}: scales {list(scales.shape)} do not fit codes "
                              f"{list(codes.shape)} ({n} rows of {k} values in groups of "
                              f"{scheme.group})")
        if scheme.has_biases and (biases is None or biases.shape != scales.shape):
            raise WeightError(f"{where}: needs {base}.biases of shape {list(scales.shape)}")
        kinds: list[tuple[str, np.ndarray]] = [("scales", scales)]
        if biases is not None:
            kinds.append(("biases", biases))
        if not scheme.has_biases and biases is not None:
            raise WeightError(f"{where}: {scheme.mode} has no biases, {base}.biases is there")
        packs.rows.append(LoadedWeight(weight_name, (n, k), scheme.label,
                                       np.ascontiguousarray(codes).reshape(-1).view(np.uint8)))
        for kind, array in kinds:
            encoding = _SCALE_DTYPES.get(array.dtype) or (
                "bf16" if array.dtype.name == "bfloat16" else None)
            if encoding is None or (scheme.scale_dtype is not None and kind == "scales"
                                    and array.dtype != scheme.scale_dtype):
                raise WeightError(f"{where}: {kind} of dtype {array.dtype} (expected "
                                  f"{scheme.scale_dtype or 'f32, f16 or bf16'})")
            packs.rows.append(LoadedWeight(f"{base}.{kind}", tuple(array.shape), encoding,
                                           np.ascontiguousarray(array).reshape(-1)
                                           .view(np.uint8)))
        packs.schemes[weight_name] = scheme
        for name in (weight_name, scales_name, f"{base}.biases"):
            source.dense.pop(name, None)
    return packs
