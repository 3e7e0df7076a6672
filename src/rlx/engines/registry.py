"""Which engines exist, how to import each, and the one-line error when one is missing."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from rlx.errors import EngineError

__all__ = ["ENGINES", "PRECISIONS", "PREPACK_MODES", "ENGINE_NAMES", "WARM_ENGINES",
           "MEMORY_HINTS", "available_engines", "engine_module", "engine_versions",
           "engine_fingerprints", "check_precision", "check_prepack", "check_memory"]

ENGINE_NAMES = ("numpy", "onnxruntime", "openvino")
ENGINES = ("auto", *ENGINE_NAMES)
PRECISIONS = ("exact", "fast")
PREPACK_MODES = ("mapped", "heap", "off")
"""How the onnxruntime engine prepacks weights (`rlx.load(prepack=...)`, docs/engines.md)."""
MEMORY_HINTS = ("private", "shared")
"""`rlx.load(memory=...)`: "shared" when several worker processes load one file, so that
auto leaves out engines that would hold a copy of the weights in each (docs/engines.md)."""
WARM_ENGINES = ("auto", "onnxruntime")
"""The engines a load may run on onnxruntime's saved model, from the header alone
(`rlx.engines.warm`)."""

# engine -> (rlx module, the package it needs, pip command)
_TABLE = {
    "numpy": ("rlx.engines.numpy_engine", "numpy", "pip install rlx"),
    "onnxruntime": ("rlx.engines.onnxruntime_engine", "onnxruntime", "pip install onnxruntime"),
    "openvino": ("rlx.engines.openvino_engine", "openvino", "pip install 'rlx[openvino]'"),
}


def check_engine(name: str) -> None:
    if name not in ENGINES:
        raise EngineError(f"unknown engine {name!r}; expected one of {', '.join(ENGINES)}")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise EngineError(f"unknown precision {precision!r}; expected exact or fast")


def check_prepack(prepack: str) -> None:
    if prepack not in PREPACK_MODES:
        raise EngineError(f"unknown prepack mode {prepack!r}; expected one of "
                          f"{', '.join(PREPACK_MODES)}")


def check_memory(memory: str) -> None:
    if memory not in MEMORY_HINTS:
        raise EngineError(f"unknown memory hint {memory!r}; expected one of "
                          f"{', '.join(MEMORY_HINTS)}")


def is_installed(name: str) -> bool:
    """Whether the engine's package can be imported: an imported one is (numpy, for the
    numpy engine, always is), without importlib.util (~25 KiB of code) to search for it."""
    package = _TABLE[name][1]
    if sys.modules.get(package) is not None:
        return True
    import importlib.util

    return importlib.util.find_spec(package) is not None


def available_engines() -> list[str]:
    """The concrete engines whose runtime package is installed, numpy first."""
    return [name for name in ENGINE_NAMES if is_installed(name)]


def engine_module(name: str) -> Any:
    """The engine's rlx module; EngineError with the pip command when its runtime is absent."""
    check_engine(name)
    module, package, pip = _TABLE[name]
    if not is_installed(name):
        raise EngineError(f"engine {name!r} needs the {package} package, which is not "
                          f"installed: {pip}")
    return importlib.import_module(module)


def engine_fingerprints(names) -> dict[str, str]:
    """Where each engine's package is installed and when it was (changes with any
    reinstall); for auto's cache key, ~100x cheaper than reading package metadata."""
    import importlib.util
    import os

    out = {}
    for name in names:
        spec = importlib.util.find_spec(_TABLE[name][1])
        origin = spec.origin if spec is not None and spec.origin else "?"
        try:
            out[name] = f"{origin}@{os.stat(origin).st_mtime_ns}"
        except OSError:
            out[name] = origin
    return out


def engine_versions(names) -> dict[str, str]:
    """Installed version of each engine's runtime package (part of auto's cache key)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in names:
        try:
            out[name] = version(_TABLE[name][1])
        except PackageNotFoundError:
            out[name] = "?"
    return out
