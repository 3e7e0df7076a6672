"""The CPU runtime: `Session` and `CompiledGraph`, running the kernels of `rlx.kernels`.

Names load on first use (`rlx._lazy`): the feed checks every engine shares import no kernel.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "CompiledGraph": "rlx.runtime.session",
    "Session": "rlx.runtime.session",
    "check_feeds": "rlx.runtime.feeds",
    "conform_feed": "rlx.runtime.feeds",
}
__all__ = ["CompiledGraph", "Session", "check_feeds", "conform_feed"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
