"""Races against a second process that renames, swaps, truncates and moves the file rlx is
loading (issue 31, docs/reliability.md "Check what you use").

`race(surface, iterations)` lays out a folder: `model.rlx` (signed by the trusted key), the
signed file kept under another name, an unsigned look-alike of the same size, and a
foreign (non-rlx) file. A second process (`python -m tests.hardening.race`) then loops,
until told to stop or after `MAX_SWAPS` steps, placing one of them at `model.rlx` by an
atomic rename, moving `model.rlx` away, or putting a copy there and truncating it in
place. Meanwhile this process loads the path `iterations` times through one surface (a
load, a signature check, an engine build, a cache save) and judges every outcome against
float64 oracles of both models: the contract is the signed model's results (or, where no
signature is asked for, those of one whole file that was at the path) or a typed
`RlxError`; foreign weights, a mix, or any other exception is a violation. Bounded by
counts, never by time.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_SWAPS = 1_000_000  # the swapper's own bound, should the loader never stop it
ACTIONS = ("signed",) * 4 + ("unsigned", "foreign", "move", "truncate")
# after each step the swapper looks at the path up to this many times (a count, not a
# clock: ~1 us each) before the next, longer when it left the signed file there, so that
# most loads get far enough to build engines and save caches while the swaps go on
DWELL = {"signed": 5_000, "other": 1_000}
PASSWORD = "race"


# -- the second process ----------------------------------------------------------------------
def swap(folder: Path, seed: int) -> Counter:
    """Place files at `folder/model.rlx` until `folder/stop` appears (looking for it
    between steps); the signed file is back at the path when it returns. Returns how
    often each action ran."""
    rng, done = random.Random(seed), Counter()
    path, tmp = folder / "model.rlx", folder / "incoming.tmp"
    keep = {"signed": folder / "signed.keep", "unsigned": folder / "unsigned.keep",
            "foreign": folder / "foreign.keep"}
    print("ready", flush=True)
    for _ in range(MAX_SWAPS):
        if (folder / "stop").exists():
            break
        action = rng.choice(ACTIONS)
        try:
            _clear(tmp)
            if action in keep:
                os.link(keep[action], tmp)  # the very inode: no copy, no write
                os.replace(tmp, path)
            elif action == "move":
                os.replace(path, folder / "moved.rlx")
            else:
                shutil.copyfile(keep["signed"], tmp)
                os.replace(tmp, path)
                os.truncate(path, rng.randrange(os.path.getsize(path)))
        except OSError:  # the path was already moved away: nothing to do this step
            pass
        done[action] += 1
        for _ in range(rng.randrange(DWELL["signed" if action == "signed" else "other"])):
            os.path.lexists(path)
    _clear(tmp)
    os.link(keep["signed"], tmp)
    os.replace(tmp, path)
    return done


def _clear(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# -- this process ------------------------------------------------------------------------------
@dataclass
class Models:
    """The files of a race and what each computes."""

    folder: Path
    public: object  # the trusted key
    oracles: dict[str, Callable] = field(default_factory=dict)  # "signed"/"unsigned" -> f64

    @property
    def path(self) -> Path:
        return self.folder / "model.rlx"


def lay_out(folder: Path, *, encrypted: bool = False) -> Models:
    """The race's folder, `model.rlx` signed, its look-alike and a foreign file beside."""
    from rlx.artifact.signing import generate_keypair, sign_artifact
    from tests.engines.conftest import write_mlp

    key = generate_keypair()
    password = PASSWORD if encrypted else None
    signed = write_mlp(folder / "model.rlx", seed=0, password=password)
    unsigned = write_mlp(folder / "unsigned.keep", seed=1, password=password)
    sign_artifact(signed.path, key)
    os.link(signed.path, folder / "signed.keep")
    (folder / "foreign.keep").write_bytes(os.urandom(signed.path.stat().st_size))
    return Models(folder, key.public_key(),
                  {"signed": signed.oracle, "unsigned": unsigned.oracle})


@dataclass
class Report:
    surface: str
    iterations: int
    outcomes: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    swaps: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"surface": self.surface, "iterations": self.iterations,
                "outcomes": dict(self.outcomes), "violations": self.violations[:20],
                "swaps": self.swaps}


def whose(outputs, models: Models, x) -> str:
    """Which model's results `outputs` are ("signed", "unsigned") or "mixed"."""
    import numpy as np

    for name, oracle in models.oracles.items():
        if all(np.allclose(got, want, rtol=1e-4, atol=1e-5)
               for got, want in zip(outputs, oracle(x))):
            return name
    return "mixed"


def race(surface: str, iterations: int, *, seed: int = 0) -> Report:
    """Load through `surface` (`SURFACES`) `iterations` times while a second process
    swaps the files; the report says what each load gave."""
    from rlx.errors import RlxError
    from tests.engines.conftest import feeds

    load, allowed, encrypted = SURFACES[surface]
    report = Report(surface, iterations)
    x = feeds()["x"]
    with tempfile.TemporaryDirectory(prefix="rlx-race-") as tmp:
        models = lay_out(Path(tmp), encrypted=encrypted)
        swapper = subprocess.Popen([sys.executable, "-m", "tests.hardening.race", tmp,
                                    str(seed)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert swapper.stdout is not None
        swapper.stdout.readline()  # "ready": the swapping has begun
        try:
            for i in range(iterations):
                try:
                    outcome = whose(load(models, i).run({"x": x}), models, x)
                except RlxError as err:
                    outcome = f"refused: {type(err).__name__}"
                except Exception as err:  # noqa: BLE001 - the contract's violation
                    outcome = "untyped"
                    report.violations.append(f"{i}: {type(err).__name__}: {err}"[:300])
                if not outcome.startswith("refused") and outcome not in allowed \
                        and outcome != "untyped":
                    report.violations.append(f"{i}: ran the {outcome} weights")
                report.outcomes[outcome] += 1
        finally:
            (Path(tmp) / "stop").touch()
            out, _ = swapper.communicate()
        report.swaps = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        _after(surface, models, x, report)
    return report


def _after(surface: str, models: Models, x, report: Report) -> None:
    """Once the path holds the signed file again, a load must run it, from whatever the
    race left in the caches."""
    try:
        outputs = SURFACES[surface][0](models, 1).run({"x": x})
    except Exception as err:  # noqa: BLE001
        report.violations.append(f"after the race: {type(err).__name__}: {err}"[:300])
        return
    if whose(outputs, models, x) != "signed":
        report.violations.append("after the race: the signed file ran other weights "
                                 "(a poisoned cache)")


def _load(engine: str, *, signed: bool = True, cache_every: int = 0, **extra):
    """A surface: `rlx.load` on `engine`, with the trusted key when `signed`; with a cache
    folder that is wiped every `cache_every` loads (so builds and saves race too)."""
    def load(models: Models, i: int):
        import rlx

        kwargs = dict(extra)
        if signed:
            kwargs["trusted_keys"] = [models.public]
        if cache_every:
            cache = models.folder.parent / (models.folder.name + "-cache")
            if i % cache_every == 0:
                shutil.rmtree(cache, ignore_errors=True)
            kwargs["cache_dir"] = cache
        return rlx.load(models.path, engine=engine, **kwargs)

    return load


ONLY_SIGNED, EITHER = {"signed"}, {"signed", "unsigned"}
# surface -> (load, outcomes within the contract, encrypted files)
SURFACES: dict[str, tuple[Callable, set, bool]] = {
    "load": (_load("numpy", signed=False), EITHER, False),
    "signature": (_load("numpy"), ONLY_SIGNED, False),
    "onnxruntime-save": (_load("onnxruntime", cache_every=2, prepack="mapped"), ONLY_SIGNED,
                         False),
    "onnxruntime-off": (_load("onnxruntime", prepack="off"), ONLY_SIGNED, False),
    "encrypted": (_load("onnxruntime", password=PASSWORD, cache_every=2), ONLY_SIGNED, True),
    "auto-cache": (_load("auto", cache_every=2), ONLY_SIGNED, False),
    "openvino": (_load("openvino"), ONLY_SIGNED, False),
}


if __name__ == "__main__":  # the second process
    print(json.dumps(swap(Path(sys.argv[1]), int(sys.argv[2]))), flush=True)
