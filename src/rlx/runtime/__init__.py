"""The CPU runtime: `Session`, `CompiledGraph` and the numpy kernel registry."""

from rlx.runtime.session import CompiledGraph, Session

__all__ = ["CompiledGraph", "Session"]
