"""Bounded fuzzing in CI: mutated cases per target, and hypothesis-driven structure-aware
cases (a valid file with one field wrong), all judged by `harness.check_case`.

The long run (`make fuzz`, scripts/fuzz.py) uses the same targets and mutators with
>= 100,000 cases; this keeps a few thousand, deterministic, so a failure reproduces.
"""

from __future__ import annotations

import json
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlx.artifact.layout import PREAMBLE
from tests.hardening import harness, mutate, seeds

# cases per target: about a minute in all on this machine
CI_CASES = {"rlx": 900, "rlxp": 400, "onnx": 350, "gguf": 500, "safetensors": 500, "npz": 400,
            "npy": 400, "dduf": 300, "mlx": 300}
HYPOTHESIS = settings(max_examples=100, deadline=None, database=None, derandomize=True,
                      suppress_health_check=[HealthCheck.too_slow,
                                             HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    for target in harness.TARGETS.values():
        target.prepare(folder)
    with harness.tracing():
        yield folder


def judge(outcomes: list[tuple[bytes, harness.Outcome]]) -> None:
    """Fail on any violation; an expected failure when only known-open ones occurred."""
    broken = [(case, o) for case, o in outcomes if o.violation]
    unknown = [(case, o) for case, o in broken if harness.known_reason(o) is None]
    if unknown:
        case, first = unknown[0]
        pytest.fail(f"{len(unknown)} contract violation(s); first: {first.violation} "
                    f"[{first.signature}] on {len(case)} bytes: {case[:200].hex()}\n"
                    f"{first.detail}")
    if broken:
        pytest.xfail("; ".join(sorted({harness.known_reason(o) for _, o in broken})))


@pytest.mark.parametrize("name", CI_CASES)
def test_mutated_cases_keep_the_contract(name, workdir):
    target = harness.TARGETS[name]
    pool = harness.pool_for(target)
    outcomes = []
    for i in range(CI_CASES[name]):
        case = target.mutate(random.Random(f"ci:{name}:{i}"), pool)
        outcomes.append((case, harness.check_case(target, case, workdir)))
    judge(outcomes)
    assert len({o.signature for _, o in outcomes}) > 3  # the cases reach different checks


def check(name: str, case: bytes, workdir) -> None:
    judge([(case, harness.check_case(harness.TARGETS[name], case, workdir))])


# -- structure-aware: valid files with one field wrong -------------------------------------
ARTIFACTS = sorted(seeds.artifacts())


@HYPOTHESIS
@given(st.sampled_from(ARTIFACTS), st.data())
def test_artifact_header_with_one_field_wrong(workdir, name, data):
    seed = seeds.artifacts()[name]
    header, body = mutate.split_rlx(seed)
    path = data.draw(st.sampled_from(mutate.json_paths(header)))
    if data.draw(st.booleans()):
        header = mutate.replace_at(header, path, data.draw(mutate.hostile_json()))
    else:
        header = mutate.delete_at(header, path)
    flags = PREAMBLE.unpack_from(seed)[2]  # the seed's form: compressed or plain header
    check("rlx", mutate.build_rlx(header, body, flags), workdir)


@HYPOTHESIS
@given(st.sampled_from(sorted(seeds.encrypted_artifacts())),
       st.sampled_from(mutate.ENC_FIELDS),
       st.one_of(st.sampled_from(mutate.EDGE_INTS), st.integers(0, 2**64 - 1)))
def test_encrypted_header_with_one_field_wrong(workdir, name, field, value):
    offset, width = field
    case = mutate.set_field(seeds.encrypted_artifacts()[name], offset, width, value)
    check("rlx", case, workdir)


@HYPOTHESIS
@given(st.sampled_from(ARTIFACTS), st.integers(0, 2**16), st.data())
def test_damaged_plaintext_in_a_valid_container(workdir, name, seed, data):
    plain = mutate.havoc(random.Random(seed), seeds.artifacts()[name])
    check("rlx", seeds.encrypt(plain), workdir)


@HYPOTHESIS
@given(st.sampled_from(["mixed", "one"]), st.data())
def test_safetensors_header_with_one_field_wrong(workdir, name, data):
    raw = seeds.safetensors_files()[name]
    length = struct.unpack_from("<Q", raw)[0]
    header = json.loads(raw[8:8 + length])
    path = data.draw(st.sampled_from(mutate.json_paths(header)))
    header = mutate.replace_at(header, path, data.draw(mutate.hostile_json()))
    text = json.dumps(header).encode()
    check("safetensors", len(text).to_bytes(8, "little") + text + raw[8 + length:], workdir)


@HYPOTHESIS
@given(st.sampled_from(mutate.gguf_fields(seeds.gguf_files()["seed"])),
       st.one_of(st.sampled_from(mutate.EDGE_INTS), st.integers(0, 2**64 - 1)))
def test_gguf_with_one_field_wrong(workdir, field, value):
    offset, width = field
    check("gguf", mutate.set_field(seeds.gguf_files()["seed"], offset, width, value), workdir)


@HYPOTHESIS
@given(st.sampled_from(sorted(seeds.npz_files())), st.integers(0, 2**16))
def test_npz_member_with_a_wrong_header(workdir, name, seed):
    rng = random.Random(seed)
    members = seeds.zip_members(seeds.npz_files()[name])
    member = rng.choice(sorted(members))
    members[member] = mutate.npy_header_edit(rng, members[member])
    check("npz", seeds.rezip(members, compressed=name == "deflated"), workdir)


@HYPOTHESIS
@given(st.sampled_from(sorted(seeds.onnx_models())),
       st.sampled_from(mutate.ONNX_EDITS), st.integers(0, 2**16))
def test_onnx_model_with_one_thing_wrong(workdir, name, edit, seed):
    from onnx import ModelProto

    model = ModelProto.FromString(seeds.onnx_models()[name])
    edit(random.Random(seed), model)
    check("onnx", model.SerializeToString(), workdir)


def test_the_time_limit_allows_linear_work_and_no_more():
    """2 s, plus 80 ms per KiB: what a valid model's size costs (the most seen: 46 ms per
    KiB); an expansion that costs far more than its bytes (a 1,135-byte model of functions
    calling each other made 16,385 nodes, 11 s) stays far over its limit."""
    assert harness.time_limit(0) == harness.SECONDS
    assert harness.time_limit(124 << 10) == pytest.approx(2.0 + 0.08 * 124)
    assert harness.time_limit(1135) < 2.1 < 11.0
