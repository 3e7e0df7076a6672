"""How values print in the commands' reports: numbers, shapes, one-line messages, and
plain JSON types for `--json`."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["fmt_bytes", "fmt_ms", "fmt_shape", "jsonable", "one_line"]


def one_line(text: object) -> str:
    """Messages from other libraries can span lines; the CLI prints errors on one."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def fmt_bytes(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def fmt_ms(ms: float | None) -> str:
    return "" if ms is None else f"{ms:.2f} ms"


def fmt_shape(dims: Sequence[Any]) -> str:
    return f"[{', '.join(str(d) for d in dims)}]"


def jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars to Python, non-finite floats to null, paths to text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value
