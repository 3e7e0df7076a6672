"""A file's bundled self-test (`rlx.artifact.self_test`) run on an engine: `rlx.load(path,
self_test=True)` and `rlx-bake verify FILE` without `--onnx`.

Every stored sample is run through the loaded `Model` (so the feeds take the path every
call takes, the engine hand-off included) and each output is compared with its stored
reference: it passes when no element is further than the output's `atol` (NaN matching NaN).

At load the test runs once per engine: a pass is cached in `<cache_dir>/self_tests.json`
under the key auto's choice uses (`rlx.engines.auto.cache_key`: the file's validated
content, `RlxFile.origin.key`, never its path (DESIGN.md 2b); the machine; the engine's
install; rlx's version; threads; precision), with only the engine that ran in it. A miss is
never cached: it is raised (`SelfTestError`) at every load. A file made in memory (no
validated content) is tested at every load. A cached pass on onnxruntime lets the
header-only warm load (`rlx.engines.warm`) stand: the file's content is the one that
passed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rlx.artifact.self_test import SelfTest, SelfTestSection
from rlx.engines.auto import JsonCache, cache_key
from rlx.engines.fingerprint import default_cache_dir
from rlx.errors import SelfTestError
from rlx.logs import Logger

if TYPE_CHECKING:
    from rlx.artifact.model import RlxFile
    from rlx.engines.model import Model

__all__ = ["CACHE_FILE", "OutputCheck", "check_at_load", "passed_before", "run_self_test",
           "stored_test"]

log = Logger("rlx.engines")

CACHE_FILE = "self_tests.json"


@dataclass(frozen=True)
class OutputCheck:
    """One output over every sample: the largest |output - reference| (`max_abs`, at
    `sample`), the stored tolerance, the lowest cosine (None for non-float outputs) and the
    verdict."""

    name: str
    max_abs: float
    atol: float
    cosine: float | None
    sample: int
    ok: bool


def stored_test(file: RlxFile, source: str) -> SelfTest:
    """The file's self-test, its blob checked and decoded now, or `SelfTestError`."""
    test = file.self_test
    if test is None:
        raise SelfTestError(f"{source} has no bundled self-test (bake it with --self-test)")
    return test.load() if isinstance(test, SelfTestSection) else test


def run_self_test(model: Model, test: SelfTest) -> list[OutputCheck]:
    """Each stored output against its reference, over every sample, on `model`'s engine."""
    names = [t.name for t in test.tolerances]
    gaps: list[list[float]] = [[] for _ in names]
    cosines: list[list[float]] = [[] for _ in names]
    for feeds, refs in zip(test.inputs, test.outputs, strict=True):
        outs = model.run(dict(feeds), names)
        for j, (out, ref) in enumerate(zip(outs, refs, strict=True)):
            gaps[j].append(_max_abs(np.asarray(out), ref))
            cosines[j].append(_cosine(np.asarray(out), ref))
    checks = []
    for j, tolerance in enumerate(test.tolerances):
        worst = int(np.argmax(gaps[j]))
        floats = test.outputs[0][j].dtype.kind in "fc"
        checks.append(OutputCheck(tolerance.name, gaps[j][worst], tolerance.atol,
                                  min(cosines[j]) if floats else None, worst,
                                  gaps[j][worst] <= tolerance.atol))
    return checks


def miss_message(source: str, engine: str, checks: list[OutputCheck]) -> str:
    """One line naming the first output that missed and how many did."""
    failed = [c for c in checks if not c.ok]
    first = failed[0]
    more = f" (and {len(failed) - 1} more output(s))" if len(failed) > 1 else ""
    return (f"{source}: self-test failed on {engine}: output {first.name!r} is {first.max_abs:.3g} "
            f"from its reference at sample {first.sample}, tolerance {first.atol:.3g}{more}")


def check_at_load(model: Model, file: RlxFile, source: str, *, threads: int | None,
                  precision: str, cache_dir: str | os.PathLike | None) -> None:
    """Run the self-test on `model`'s engine unless a pass is cached (module doc); raise
    `SelfTestError` on a miss or when the file has none."""
    key = None
    if file.origin is not None:
        key = cache_key(file.origin.key, [model.engine], threads, precision)
    cache = _cache(cache_dir)
    if key is not None and _passed(cache, key, model.engine):
        log.info("%s: self-test passed on %s before (cached)", source, model.engine)
        return
    checks = run_self_test(model, stored_test(file, source))
    if not all(c.ok for c in checks):
        raise SelfTestError(miss_message(source, model.engine, checks))
    log.info("%s: self-test passed on %s", source, model.engine)
    if key is not None:
        cache.put(key, {"passed": True, "engine": model.engine, "precision": precision,
                        "max_abs": {c.name: c.max_abs for c in checks}})


def passed_before(content: str, engine: str, *, threads: int | None, precision: str,
                  cache_dir: str | os.PathLike | None) -> bool:
    """Whether the file of validated `content` (`RlxFile.origin.key`) passed its self-test
    on `engine` here before (what lets a warm load skip it: `rlx.engines.warm`)."""
    return _passed(_cache(cache_dir), cache_key(content, [engine], threads, precision),
                   engine)


def _cache(cache_dir: str | os.PathLike | None) -> JsonCache:
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return JsonCache(folder, CACHE_FILE, "self-test")


def _passed(cache: JsonCache, key: str, engine: str) -> bool:
    entry = cache.read().get(key)
    return isinstance(entry, dict) and entry.get("passed") is True \
        and entry.get("engine") == engine


def _max_abs(out: np.ndarray, ref: np.ndarray) -> float:
    """Largest |out - ref|, NaN matching NaN and an infinity the same one; inf when the
    shapes differ."""
    if out.shape != ref.shape:
        return float("inf")
    x, y = out.astype(np.float64), ref.astype(np.float64)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    with np.errstate(invalid="ignore"):
        gaps = np.where(same, 0.0, np.abs(x - y))
    gaps = np.where(np.isnan(gaps), np.inf, gaps)
    return float(np.max(gaps, initial=0.0))


def _cosine(out: np.ndarray, ref: np.ndarray) -> float:
    if out.shape != ref.shape:
        return 0.0
    a, b = out.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 and nb == 0:
        return 1.0
    value = float(a @ b / (na * nb)) if na and nb else 0.0
    return value if np.isfinite(value) else 0.0
