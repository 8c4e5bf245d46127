"""The structure fuzzer: random Extended-node models through onnxruntime
with extql's library, in a child process (tests/fuzz_models.py).

Every model either runs bit-exact against tests/contract.py or fails with an
onnxruntime error, at session creation or at run, as tests/fuzz_models.py
``expectation`` says; none may crash or hang the child (each case has a
timeout).  The child reports each case as it finishes, so a crash is pinned
on its case, and hypothesis then shrinks it to a small model.

``EXTQL_FUZZ_CASES`` sets the number of cases per kernel variant (default 300;
``tox -e fuzz`` runs 20000).  ``EXTQL_FUZZ_REPORT=path.json`` writes
the counts.
"""

from __future__ import annotations

import collections
import json
import os

import pytest
from fuzz_models import Worker, WorkerDied, expectation, specs
from hypothesis import HealthCheck, given, settings

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

CASES = int(os.environ.get("EXTQL_FUZZ_CASES", "300"))
STATS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
OP_NAMES = ("ExtendedQuantizeLinear", "ExtendedDequantizeLinear", "VitisQuantizeLinear",
            "VitisDequantizeLinear")


@pytest.fixture(scope="module")
def worker(kernel_isa):
    env = dict(os.environ)
    env.pop("EXTQL_ISA", None)
    if kernel_isa == "baseline":
        env["EXTQL_ISA"] = "baseline"
    w = Worker(env)
    yield w
    w.close()
    stats = STATS[kernel_isa]
    stats["worker processes"] = w.started
    report = os.environ.get("EXTQL_FUZZ_REPORT")
    if report:
        data = {}
        if os.path.exists(report):
            with open(report) as f:
                data = json.load(f)
        data[kernel_isa] = dict(sorted(stats.items()))
        data[kernel_isa]["onnxruntime"] = w.info.get("onnxruntime")
        with open(report, "w") as f:
            json.dump(data, f, indent=1)


@settings(max_examples=CASES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=specs())
def test_random_model_is_exact_or_an_error(worker, kernel_isa, spec):
    verdict, why = expectation(spec)
    result = worker.run(spec)  # raises when the child crashes or hangs
    stats = STATS[kernel_isa]
    stats["cases"] += 1
    stats[f"expected {verdict}"] += 1
    stats[f"outcome {result['stage']}"] += 1
    stats[f"by reason: {why} -> {result['stage']}"] += 1
    stats[f"by fault: {spec['fault']} -> {result['stage']}"] += 1
    what = f"{why}: {json.dumps(spec)}\n-> {json.dumps(result)}"
    assert result["stage"] != "build", f"the case could not be built: {what}"
    if result["stage"] == "ok" and "exact" in result:
        stats["ran, bit-exact" if result["exact"] else "ran, NOT exact"] += 1
        assert result["exact"], f"ran but not bit-exact: {what}"
    if verdict == "ok":
        assert result["stage"] == "ok", f"a valid model failed: {what}"
        assert "exact" in result
    elif verdict == "error":
        assert result["stage"] in ("create", "run"), f"ran when it must fail: {what}"
        stats[f"failed at {result['stage']}"] += 1
        if why.startswith(("contract", "axis attribute")) and spec["out_type"] != "wrong":
            # the shim's own checks (onnxruntime's type inference may see a
            # wrongly declared output first): the message names the operator
            assert any(name in result["message"] for name in OP_NAMES), what
            stats["error names the operator"] += 1
    else:
        stats[f"either: {result['stage']}"] += 1
        if result["stage"] != "ok":
            stats[f"either message: {result['message'][:150]}"] += 1


def test_worker_pins_a_crash_and_a_hang_on_the_case(kernel_isa):
    """The harness itself: a child that aborts or hangs inside a case is
    reported with that case, and the next case gets a fresh child."""
    w = Worker(case_timeout=2)
    try:
        with pytest.raises(WorkerDied, match=r"died \(exit code -6\)[\s\S]*\"abort\""):
            w.run({"selftest": "abort"})
        with pytest.raises(WorkerDied, match=r"hung and was killed[\s\S]*\"selftest\": \"hang\""):
            w.run({"selftest": "hang"})
        valid = {
            "op": "q", "form": "extended", "domain_version": 1, "shape": [2, 3],
            "x_type": "float32", "s_type": "float32", "s_shape": [3], "zp_mode": "given",
            "zp_type": "int8", "zp_shape": [3], "axis_kind": "none", "axis": 1,
            "extra_attrs": [], "structure": "normal",
            "sources": {"x": "input", "s": "init", "z": "init"}, "in_shapes": "exact",
            "out_type": "right", "out_shape": "right", "extra_output": False, "threads": 1,
            "style": "mixed", "scale_kind": "special", "seed": 1, "fault": "none",
        }
        assert expectation(valid)[0] == "ok"
        assert w.run(valid) == {"stage": "ok", "exact": True, "event": "end", "id": 3}
        assert w.started == 3
    finally:
        w.close()
