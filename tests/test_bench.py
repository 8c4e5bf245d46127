"""``extql bench``: that it runs and reports, never how fast (speed is not
asserted in unit tests)."""

from __future__ import annotations

import argparse
import json

import pytest

from extql import bench, cli
from extql.types import QTYPES


def test_quick_run_prints_every_table(capsys, tmp_path):
    out_json = tmp_path / "bench.json"
    out_md = tmp_path / "bench.md"
    rc = cli.main(["bench", "--quick", "-q", "--json", str(out_json), "--markdown", str(out_md)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| op | type | anchor | gran. | thr | 64K ratio / copy% |" in text
    for name in QTYPES:
        assert f"| Q | {name} |" in text and f"| DQ | {name} |" in text
    doc = json.loads(out_json.read_text())
    assert doc["machine"]["cores"] >= 1 and doc["command"].startswith("extql bench")
    rows = doc["results"]
    ort_rows = [r for r in rows if r["table"] == "ort"]
    assert len(ort_rows) == 2 * len(QTYPES)
    if not _can_bind_bfloat16():  # older onnxruntime: those rows say why they are empty
        for r in ort_rows + [r for r in rows if r["table"] == "fallback"]:
            if r["type"] == "bfloat16":
                assert "cannot bind bfloat16" in r["note"]
        rows = [r for r in rows if r["type"] != "bfloat16" or r["table"] == "numpy"]
        ort_rows = [r for r in ort_rows if r["type"] != "bfloat16"]
    for r in ort_rows:
        assert r["extql"] > 0 and r["copy"] > 0, r
        assert r["exact"] in ("=ort", "=api"), r
        shared = (r["op"] == "Q" and r["type"] in bench.ORT_Q_TYPES) or (
            r["op"] == "DQ" and r["type"] in bench.ORT_DQ_TYPES)
        if shared:
            assert r["anchor_name"].startswith("onnxruntime")
            if r["anchor"] is not None:
                assert r["exact"] == "=ort"
            else:  # e.g. onnxruntime 1.18 refuses an int32 zero point other than 0
                assert r["note"].startswith("anchor failed") and r["exact"] == "=api"
        elif r["type"] in ("float16", "bfloat16"):
            assert r["anchor_name"] == "Cast" and r["anchor"] > 0
        else:
            assert r["anchor"] is None  # no onnxruntime op to compare with
    numpy_rows = [r for r in rows if r["table"] == "numpy"]
    assert len(numpy_rows) == 2 * len(QTYPES) and all(r["anchor"] > 0 for r in numpy_rows)
    fallback_rows = [r for r in rows if r["table"] == "fallback"]
    assert len(fallback_rows) == 2 * len(QTYPES) - (0 if _can_bind_bfloat16() else 2)
    if bench._attach_fallbacks() is not None:
        assert all(r["exact"] == "=fallback" for r in fallback_rows)
    else:
        assert all("not measured" in r["note"] for r in fallback_rows)
    md = out_md.read_text()
    assert md.startswith("# extql benchmark results")
    assert "extql bench --quick" in md and "copy kernel" in md


def _can_bind_bfloat16() -> bool:
    import onnxruntime

    return hasattr(onnxruntime.OrtValue, "ortvalue_from_numpy_with_onnx_type")


def test_options_select_what_runs(capsys):
    rc = cli.main(["bench", "--quick", "-q", "--tables", "ort", "--ops", "dq", "--types",
                   "uint16", "--granularity", "axis1", "--sizes", "4K", "--threads", "1", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| DQ | uint16 | onnxruntime DequantizeLinear | axis1 | 1 |" in text
    assert "| DQ | uint16 | onnxruntime DequantizeLinear | axis1 | 2 |" in text
    assert "| Q |" not in text and "## NumPy API" not in text


def test_parse_size():
    assert bench.parse_size("64K") == 65536
    assert bench.parse_size("16M") == 1 << 24
    assert bench.parse_size("4096") == 4096
    for bad in ("abc", "100", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_size(bad)


def test_time_interleaved_runs_every_function():
    calls = {"a": 0, "b": 0}

    def a():
        calls["a"] += 1

    def b():
        calls["b"] += 1

    ta, tb = bench.time_interleaved([a, b], repeat=4, min_sample=1e-5)
    assert ta > 0 and tb > 0
    assert calls["a"] >= 2 + 4 and calls["b"] >= 2 + 4


def test_a_mismatch_is_a_failure(capsys):
    bad = bench.Result("ort", "Q", "int8", "tensor", 65536, 1, 1e-5, exact="MISMATCH vs x")
    good = bench.Result("ort", "Q", "int8", "tensor", 65536, 1, 1e-5, exact="=ort")
    assert bench._status([good]) == 0
    assert bench._status([good, bad]) == 1
    assert "MISMATCH" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(QTYPES))
def test_copy_ops_move_the_bytes(name):
    """QuantizeCopy / DequantizeCopy (the bench's yardstick, registered by the
    library in com.amd.quark.bench) write the op's output bytes with no
    arithmetic: the low bytes of each float32, or each element zero-extended.
    (Where onnxruntime cannot bind bfloat16 from Python, a bfloat16 output is
    widened in the graph and a bfloat16 input becomes an initializer.)"""
    import numpy as np
    from ortutil import bfloat16_io_fallback, run, session

    qt = QTYPES[name]
    o = bench._Ort()
    data = bench._Data(5)
    n = 70_000
    scale, zp = data.scale(qt, "tensor"), data.zero_point(qt, "tensor")
    for threads in (1, 2):
        x = data.x(n)
        model, feeds = bfloat16_io_fallback(o.model("copy", "Q", qt, "tensor", scale, zp),
                                            {"x": x})
        (y,) = run(session(model, threads=threads), feeds, [qt.dtype], [x.shape])
        size = qt.dtype.itemsize
        want = (x.view(np.uint32) & np.uint32((1 << (8 * size)) - 1)).astype(f"u{size}")
        np.testing.assert_array_equal(y.view(f"u{size}"), want)

        q = data.q(n, qt, "tensor")
        model, feeds = bfloat16_io_fallback(o.model("copy", "DQ", qt, "tensor", scale, zp),
                                            {"x": q})
        (out,) = run(session(model, threads=threads), feeds, [np.float32], [q.shape])
        np.testing.assert_array_equal(out.view(np.uint32),
                                      q.view(f"u{size}").astype(np.uint32))
