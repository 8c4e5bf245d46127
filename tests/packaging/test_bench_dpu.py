"""The DPU-emulation ops' benchmark rows (``extql bench``'s dpu table and
benchmarks/dpu_ops.py) and the targets of the blocks and dpu tables: that
the rows build, run on tiny shapes, check extql's bits, and that each
target passes and fails on the right rows.  Never how fast (no timing is
asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import benchutil  # noqa: F401  (EXTQL_BENCHMARKS: this checkout's benchmarks)
import numpy as np
import onnx
import pytest

import extql
from extql import cli
from extql.rules import lstm as lstm_rules
from extql_bench import dpu, targets
from extql_bench.models import Ort
from extql_bench.runner import Result

TINY = [dpu.DpuShape("IN", (2, 3, 4, 5)), dpu.DpuShape("IN", (1, 4, 7)),
        dpu.DpuShape("LSTM", (3, 2, 5, 4))]


def test_shapes_and_labels():
    assert dpu.DPU_SHAPES["in-1x64x56x56"].label == "1x64x56x56"
    assert dpu.DPU_SHAPES["lstm-80x1"].label == "80x1x64 H128"
    assert dpu.DPU_SHAPES["lstm-80x8"].elements == 80 * 8 * 64
    assert dpu.DPU_SHAPES["in-8x64x56x56"].elements == 8 * 64 * 56 * 56
    assert dpu.resolve(["lstm-80x1", TINY[0]]) == [dpu.DPU_SHAPES["lstm-80x1"], TINY[0]]
    with pytest.raises(ValueError, match="no shape named 'in-7'"):
        dpu.resolve(["in-7"])
    for op, dims, words in [("GRU", (1, 2), "IN or LSTM"), ("IN", (4,), r"\(N, C, ...\)"),
                            ("LSTM", (1, 2, 3), "seq, batch, input, hidden"),
                            ("IN", (1, 0, 3), ">= 1")]:
        with pytest.raises(ValueError, match=words):
            dpu.DpuShape(op, dims)


def test_models_are_quarks_nodes():
    """The extql models carry the nodes as Quark writes them (domain,
    attributes extql.rules.lstm accepts, parameters initializers); the
    anchors are ONNX's own float ops on the same initializers."""
    o = Ort()
    attrs, feeds = dpu.lstm_inputs((3, 2, 5, 4))
    ext = dpu.lstm_model(o, attrs, feeds, True)
    flt = dpu.lstm_model(o, attrs, feeds, False)
    onnx.checker.check_model(flt)
    for model in (ext, flt):
        assert [i.name for i in model.graph.input] == ["x"]
        assert sorted(t.name for t in model.graph.initializer) == ["B", "R", "W"]
    (node,) = ext.graph.node
    assert (node.op_type, node.domain) == ("ExtendedLSTM", "com.amd.quark")
    node_attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    node_attrs["direction"] = node_attrs["direction"].decode()
    lstm_rules.check_lstm(node_attrs)  # every required attribute, in range
    assert flt.graph.node[0].op_type == "LSTM" and flt.graph.node[0].domain == ""
    feeds_in = dpu.in_inputs((1, 3, 2, 2))
    (in_node,) = dpu.in_model(o, feeds_in, True).graph.node
    assert (in_node.op_type, in_node.domain) == ("ExtendedInstanceNormalization",
                                                 "com.amd.quark")
    onnx.checker.check_model(dpu.in_model(o, feeds_in, False))


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("shape", TINY, ids=lambda s: s.label)
def test_contenders_compute_the_op(shape):
    """The three contenders run on the same input: the library's bits are
    the NumPy API's, and onnxruntime's float op is the same computation
    (within the DPU's bfloat16 / 16-bit rounding)."""
    c = dpu.row_contenders(Ort(), shape, 1)
    c["library"]()
    c["anchor"]()
    got = c["y"]
    np.testing.assert_array_equal(got.view(np.uint32), c["numpy"]().view(np.uint32))
    flt = c["anchor"].output()
    assert flt.shape == got.shape
    tol = 0.05 if shape.op == "IN" else 2e-3  # bfloat16 steps / the uint16 grid
    np.testing.assert_allclose(got, flt, atol=tol, rtol=tol)


@pytest.mark.usefixtures("kernel_isa")
def test_run_dpu_table_rows():
    rows: list[Result] = []
    default_threads = extql.get_num_threads()
    dpu.run_dpu_table(TINY, [1, 2], repeat=1, min_sample=1e-5, check=True, spin=False,
                      emit=rows.append)
    assert [(r.granularity, r.threads, r.type) for r in rows] == [
        (s.label, t, kind) for s in TINY for t in (1, 2) for kind in ("library", "numpy")]
    for r in rows:
        assert r.table == "dpu" and r.exact == "=api", r
        assert r.extql > 0 and r.anchor > 0 and r.anchor_name == dpu.ANCHORS[r.op]
    assert extql.get_num_threads() == default_threads  # reset, not left at 2


@pytest.mark.usefixtures("kernel_isa")
def test_cli_dpu_table(tmp_path):
    """``extql bench --tables dpu --dpu ...``: the table, its targets line
    and the JSON rows."""
    out = tmp_path / "dpu.json"
    rc = cli.main(["bench", "-q", "--tables", "dpu", "--dpu", "in-1x256x14x14", "lstm-80x1",
                   "--threads", "1", "--repeat", "1", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert "--dpu in-1x256x14x14 lstm-80x1" in doc["command"]
    rows = doc["results"]
    assert {(r["granularity"], r["type"]) for r in rows} == {
        (s, k) for s in ("1x256x14x14", "80x1x64 H128") for k in ("library", "numpy")}
    assert all(r["exact"] == "=api" and r["ratio"] > 0 for r in rows)


def _dpu(op, shape, threads, ratio, kind="library"):
    return Result("dpu", op, kind, shape, 1, threads, ratio, anchor_name="a", anchor=1.0)


def test_targets_pass_and_fail():
    """The blocks target (>= 10x faster than the fallback model, every row)
    and the instance norm's (<= 2x onnxruntime's float op at 1x64x56x56,
    every thread count): met, missed, and rows they do not apply to."""
    blocks = [Result("blocks", "BFP", "bfp16", "nchw", 65536, 1, 0.05, anchor=1.0),
              Result("blocks", "MX", "mxfp4", "axis1", 65536, 2, 0.2, anchor=1.0),
              Result("blocks", "MX", "mxint8", "axis1", 65536, 2, float("nan"), anchor=1.0)]
    ins = [_dpu("IN", "1x64x56x56", 1, 1.9), _dpu("IN", "1x64x56x56", 2, 2.5, "numpy"),
           _dpu("IN", "1x256x14x14", 1, 9.0), _dpu("LSTM", "80x1x64 H128", 1, 7.0)]
    got = {name: (met, total, worst) for name, met, total, worst in
           targets.check_targets(blocks + ins)}
    (block_name,) = [n for n in got if n.startswith("block format")]
    (in_name,) = [n for n in got if n.startswith("instance norm")]
    assert got[block_name][:2] == (1, 2) and got[block_name][2].type == "mxfp4"
    assert got[in_name][:2] == (1, 2) and got[in_name][2].threads == 2
    text = targets.format_targets(blocks + ins)
    assert "| 1 of 2 | MX mxfp4 axis1 64K t=2: ratio 0.20 |" in text
    assert "IN numpy 1x64x56x56" in text and "ratio 2.50" in text
    met = targets.check_targets([_dpu("IN", "1x64x56x56", 1, 2.0)])
    assert [(m, t) for _, m, t, _ in met] == [(1, 1)]


def test_quark_targets_pass_and_fail():
    def row(op, shape, threads, speedup):
        return {"op": op, "shape": shape, "threads": threads, "speedup": speedup}

    rows = [row("IN", "1x64x56x56", 1, 12.0), row("IN", "8x64x56x56", 1, 9.0),
            row("IN", "1x64x56x56", 2, 3.0),  # 2 threads: no target
            row("LSTM", dpu.LSTM_QUARK_SIZE, 1, 2.9), row("LSTM", "80x8x64 H128", 1, 5.0),
            row("LSTM", "80x8x64 H128", 1, None)]  # Quark not measured: counts for none
    got = {n: (met, total, worst) for n, met, total, worst in
           targets.check_quark_targets(rows)}
    assert len(got) == 3
    in_t, lstm_any, lstm_3x = (got[n] for n, _, _ in targets.QUARK_TARGETS)
    assert in_t[:2] == (1, 2) and in_t[2]["shape"] == "8x64x56x56"
    assert lstm_any[:2] == (2, 2)
    assert lstm_3x[:2] == (0, 1) and lstm_3x[2]["speedup"] == 2.9


@pytest.mark.parametrize("quark_python", ["missing", "no-quark"])
def test_dpu_ops_script_without_quark(tmp_path, quark_python):
    """benchmarks/dpu_ops.py runs without Quark's library and says why its
    column is empty: no such environment, or one whose Python has no
    amd-quark (this test environment's own)."""
    python = str(tmp_path / "nothing") if quark_python == "missing" else sys.executable
    out = tmp_path / "rows.json"
    script = os.path.join(os.environ["EXTQL_BENCHMARKS"], "dpu_ops.py")
    proc = subprocess.run([sys.executable, script, "--shapes", "in-1x256x14x14", "--threads", "1",
                           "--rounds", "1", "--quark-python", python, "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    why = ("no Quark environment at" if quark_python == "missing"
           else "Quark's library does not load")
    assert f"Quark: not measured: {why}" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("python benchmarks/dpu_ops.py --shapes in-1x256x14x14")
    assert doc["machine"]["cores"] >= 1 and doc["quark"].startswith(why)
    (row,) = doc["rows"]
    assert row["quark_1t_ms"] is None and row["speedup"] is None and row["bits_quark"] is None
    assert row["bits_api"] and row["library_ms"] > 0 and row["ort_float_ms"] > 0
    assert "| IN | 1x256x14x14 | 1 | - |" in proc.stdout
