"""Replay the kept corpus (tests/hardening/corpus/<target>/*.bin): cases the long fuzz runs
found interesting (each reached a distinct check) or that once broke the contract."""

from __future__ import annotations

import re

import pytest

from tests.hardening import harness

CASES = [(name, path) for name in harness.TARGETS for path in harness.corpus_files(name)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    for target in harness.TARGETS.values():
        target.prepare(folder)
    with harness.tracing():
        yield folder


def test_the_corpus_is_small_and_covers_every_target():
    assert {name for name, _ in CASES} == set(harness.TARGETS)
    assert sum(path.stat().st_size for _, path in CASES) < 1 << 20


@pytest.mark.parametrize("name, path", CASES, ids=[f"{n}/{p.name}" for n, p in CASES])
def test_corpus_case_keeps_the_contract(name, path, workdir):
    outcome = harness.check_case(harness.TARGETS[name], path.read_bytes(), workdir)
    if outcome.violation:
        reason = harness.known_reason(outcome)
        if reason:
            pytest.xfail(reason)
        pytest.fail(f"{outcome.violation} [{outcome.signature}]\n{outcome.detail}")


def test_each_known_open_entry_still_happens(workdir):
    """Strict: once the owner fixes a bug, its entry must leave the table."""
    for target, pattern in harness.KNOWN_OPEN:
        outcomes = [harness.check_case(harness.TARGETS[target], path.read_bytes(), workdir)
                    for path in harness.corpus_files(target)]
        assert any(o.violation and re.search(pattern, o.signature) for o in outcomes), \
            f"no corpus case breaks the contract this way any more: remove {pattern!r}"
