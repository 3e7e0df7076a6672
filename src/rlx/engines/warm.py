"""A warm load: a `.rlx` file that runs on onnxruntime's saved prepacked model needs only
its header.

Once onnxruntime has been chosen for a file (by `engine="auto"`, whose choice is cached,
or asked for) and has saved its optimised, prepacked copy of the model (`saved_models`), a
later load needs nothing of the artifact but its declared inputs and outputs: the weights
onnxruntime runs are in that copy. So this load reads the preamble and the header (checked
as the full reader checks them: magic, schema, checksum, bounded inflate and parse) and
never builds the graph, which spares importing the graph IR and the reader (~60 ms) and
parsing and verifying the graph (~25 ms on a 250-node model): on small models that is
most of rlx's time to first result.

The saved copy is keyed by the artifact's content (the header's digest, which covers
every blob's checksum, read here from the same descriptor as the header it checks), the
machine, onnxruntime's install and rlx's version, so a file that is not the one the copy
was made from never finds it; its manifest is checked before it is used
(`saved_models.check_saved`). The full reader refuses a file whose declared inputs and
outputs disagree with its graph, so the header's are the graph's. Anything unusual (an
encrypted or packaged file, a signature to check, another prepack mode, a damaged header or
saved model) returns None, and `rlx.load` takes the full path, which reports the problem or
rebuilds the copy.

Why it exists: on small models the header alone is most of the way to the first result.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlx.artifact.header import io_fields, read_header
from rlx.artifact.layout import MAGIC, PREAMBLE
from rlx.artifact.precision import PrecisionPlan
from rlx.engines import registry
from rlx.engines.fingerprint import default_cache_dir
from rlx.engines.model import FeedInput, IoSpec, Model
from rlx.engines.saved_models import check_saved, saved_folder
from rlx.errors import RlxError
from rlx.ir.dtype import DType
from rlx.ir.shape import Shape
from rlx.logs import Logger
from rlx.safeio.files import open_regular, read_fd

__all__ = ["load_warm"]

log = Logger("rlx.engines")


class _Refused(RlxError):
    """What makes the warm load give way to the full one (never seen by callers)."""


def _fail(message: str, error: type = _Refused):
    raise _Refused(message)


def load_warm(path: str, engine: str, *, threads: int | None, precision: str,
              cache_dir: str | os.PathLike | None, memory: str = "private",
              self_test: bool = False) -> Model | None:
    """The model on onnxruntime's saved copy, from the header alone, or None (see the
    module doc) for `rlx.load` to load it in full. `self_test`: only when this content's
    self-test passed on onnxruntime before (`rlx.engines.self_test`)."""
    if engine not in registry.WARM_ENGINES or not registry.is_installed("onnxruntime"):
        return None
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        declared = _declared(path)
        if declared is None:  # not a plain .rlx: left to the full load, unhashed
            return None
        key, name, inputs, outputs, plan = declared
        if plan is not None and precision == "exact":  # the saved model is the plan's
            return None
        at = threads  # onnxruntime's threads: auto's timing may have fitted them to the cores
        if engine == "auto":
            from rlx.engines.auto import cached_choice, run_threads

            entry = cached_choice(key, threads=threads, precision=precision, cache_dir=folder,
                                  memory=memory)
            # a choice with candidates left unbuilt is measured on (rlx.engines.auto)
            if entry is None or entry["engine"] != "onnxruntime" or entry.get("unbuilt"):
                return None
            at = run_threads(entry, threads)
        if self_test:
            from rlx.engines.self_test import passed_before

            if not passed_before(key, "onnxruntime", threads=threads, precision=precision,
                                 cache_dir=folder):
                return None
        saved = saved_folder(folder, key, "onnxruntime")
        problem = check_saved(saved, key)
        if problem is not None:
            log.debug("%s: no warm load (the saved model is %s)", path, problem)
            return None
        from rlx.engines.onnxruntime_engine import OrtRunner

        runner = OrtRunner.from_saved(saved, at)
        if plan is not None:
            runner.precision = plan.label
    except (OSError, RlxError) as err:  # the full load says what is wrong, if anything
        log.debug("%s: no warm load (%s)", path, err)
        return None
    except Exception as err:  # noqa: BLE001 - onnxruntime's own: the full load rebuilds it
        log.debug("%s: the saved onnxruntime model does not load (%s)", path, err)
        return None
    log.info("%s: running on onnxruntime's saved model %s, read from the header alone",
             path, saved)
    return Model(runner, inputs, outputs, name=name, path=path)


def _declared(path: str) -> tuple[str, str, list[FeedInput], list[IoSpec],
                                  PrecisionPlan | None] | None:
    """(content key, the graph's name, inputs, outputs, precision plan) as the header
    declares them,
    read through one descriptor; None when the file is no plain `.rlx` (a FIFO or a
    device is never blocked on)."""
    if os.path.isdir(path):
        return None
    fd = open_regular(path, _Refused)
    try:
        size = os.fstat(fd).st_size
        head = read_fd(fd, path, _Refused, offset=0, length=min(PREAMBLE.size, size))
        if head[:len(MAGIC)] != MAGIC:
            return None
        if len(head) < PREAMBLE.size:
            raise _Refused("not a plain .rlx file")
        length = PREAMBLE.unpack(head)[3]
        if PREAMBLE.size + length > size:
            raise _Refused("header past the end of the file")
        region = read_fd(fd, path, _Refused, offset=PREAMBLE.size, length=length)
    finally:
        os.close(fd)
    body = read_header(memoryview(head + region), path, _fail, size=size).body
    meta = body.get("meta")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise _Refused("header has no meta")
    specs = {}
    for kind in ("inputs", "outputs"):
        entries = meta.get(kind)
        if not isinstance(entries, list):
            raise _Refused(f"meta.{kind} is not a list")
        specs[kind] = [_shape(*io_fields(entry, _fail)) for entry in entries]
    inputs = [FeedInput(k, name, shape) for k, (name, shape) in enumerate(specs["inputs"])]
    outputs = [IoSpec(name, shape.dims, shape.dtype.numpy) for name, shape in specs["outputs"]]
    plan = PrecisionPlan.from_json(meta["precision_plan"], _fail) \
        if meta.get("precision_plan") else None
    return f"rlx:{head[24:40].hex()}", meta["name"], inputs, outputs, plan


def _shape(name: str, dims: tuple, dtype: str) -> tuple[str, Shape]:
    if not all(isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)
               for d in dims):
        raise _Refused(f"{name}: dims {dims!r} are not sizes or names")
    return name, Shape(dims, DType.parse(dtype))
