"""What identifies a machine, for the caches engines keep in the user's cache directory,
and where that cache lives. (The model is identified by its validated content,
`RlxFile.origin.key`, never by reading its path again.)"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

__all__ = ["default_cache_dir", "machine_id"]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlx"


def _cpu_info() -> tuple[str, str]:
    """(model name, flags) from /proc/cpuinfo; kernels are chosen by the flags. Only
    without it `platform.processor()`, which on Linux runs `uname -p` in a subprocess."""
    model, flags = "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags":
                    flags = value.strip()
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or "?", flags


def machine_id() -> str:
    """Architecture, CPU model, core count and a hash of the CPU flags."""
    model, flags = _cpu_info()
    flags_hash = hashlib.blake2b(flags.encode(), digest_size=6).hexdigest()
    return f"{platform.machine()}|{model}|{os.cpu_count()}|{flags_hash}"
