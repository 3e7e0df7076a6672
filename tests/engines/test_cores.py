"""onnxruntime's spinning rule: off when the process shares its cores, set on the session
rlx builds (read back from onnxruntime's own session options)."""

from __future__ import annotations

import pytest

import rlx
from rlx.engines import cores
from rlx.engines import onnxruntime_engine as ort_engine
from tests.engines.conftest import write_mlp


@pytest.mark.parametrize(("threads", "n_cores", "load", "spins"), [
    (2, 2, 0.0, True),  # the process has its two cores to itself
    (2, 2, 0.5, False),  # half a core taken by others: the threads no longer fit
    (2, 4, 2.0, True),
    (3, 2, 0.0, False),  # more threads than cores: workers share them with each other
    (None, 4, 0.0, True),  # onnxruntime's default: one thread per core
    (None, 4, 1.5, False),
    (1, 2, 10.0, True),  # no worker threads: nothing spins either way
])
def test_spinning_pays_only_when_the_threads_fit_on_free_cores(threads, n_cores, load, spins):
    assert cores.spinning_pays(threads, n_cores, load) is spins


def test_the_rule_reads_the_affinity_mask_and_others_load(monkeypatch):
    """The one-minute load average counts the loading thread itself: one runnable thread
    on a two-core mask leaves both cores free."""
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert cores.usable_cores() == 2 and cores.spinning_pays(2)
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (3.0, 3.0, 3.0))  # two others
    assert cores.others_load() == 2.0 and not cores.spinning_pays(2)


def _spinning_entry(model) -> str | None:
    options = model.runner.session.get_session_options()
    try:
        return options.get_session_config_entry(ort_engine.SPINNING_KEY)
    except RuntimeError:  # onnxruntime raises for an entry never set
        return None


@pytest.mark.parametrize("prepack", ["mapped", "off"])
def test_sessions_follow_the_rule(tmp_path, monkeypatch, prepack):
    """Both ways a session is made (over the saved prepacked model, and over the export)
    carry the rule's setting; spinning stays onnxruntime's default when it pays."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    for busy, expected in ((3.0, "0"), (0.0, None)):
        monkeypatch.setattr(cores.os, "getloadavg", lambda busy=busy: (busy, busy, busy))
        monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        model = rlx.load(mlp.path, engine="onnxruntime", threads=2,
                         cache_dir=tmp_path / "cache", prepack=prepack)
        assert _spinning_entry(model) == expected
