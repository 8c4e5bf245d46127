"""``extql bench`` and its harness (the package extql_bench): that it runs and
reports, never how fast (speed is not asserted in unit tests); and the copy
anchor's library (benchmarks/copy_ops), which must move exactly the op's bytes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import benchutil  # noqa: F401  (EXTQL_BENCHMARKS: this checkout's copy kernel)
import numpy as np
import pytest
from ortutil import bfloat16_io_fallback, run

from extql import cli, ort_io
from extql.rules.types import QTYPES
from extql_bench import anchors, config, copy_library, data, runner
from extql_bench.models import Ort


@pytest.mark.usefixtures("kernel_isa")
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
    if not ort_io.has_typed_ortvalues():  # older onnxruntime: those rows say why they are empty
        for r in ort_rows + [r for r in rows if r["table"] == "fallback"]:
            if r["type"] == "bfloat16":
                assert "cannot bind bfloat16" in r["note"]
        rows = [r for r in rows if r["type"] != "bfloat16" or r["table"] == "numpy"]
        ort_rows = [r for r in ort_rows if r["type"] != "bfloat16"]
    for r in ort_rows:
        assert r["extql"] > 0 and r["copy"] > 0, r
        assert r["exact"] in ("=ort", "=api"), r
        shared = (r["op"] == "Q" and r["type"] in anchors.ORT_Q_TYPES) or (
            r["op"] == "DQ" and r["type"] in anchors.ORT_DQ_TYPES)
        if shared:
            assert r["anchor_name"].startswith("onnxruntime")
            if r["anchor"] is not None:
                assert r["exact"] == "=ort"
            else:  # e.g. onnxruntime 1.18 refuses an int32 zero point other than 0
                assert r["note"].startswith("anchor failed") and r["exact"] == "=api"
        elif r["type"] in ("float16", "bfloat16"):
            assert r["anchor_name"] == "Cast" and r["anchor"] > 0
        elif r["op"] == "Q" and r["type"] in ("int32", "uint32"):  # the int16 proxy
            assert "int16" in r["anchor_name"] and r["anchor"] > 0 and r["exact"] == "=api"
        else:
            assert r["anchor"] is None  # no onnxruntime op to compare with
    numpy_rows = [r for r in rows if r["table"] == "numpy"]
    assert len(numpy_rows) == 2 * len(QTYPES) and all(r["anchor"] > 0 for r in numpy_rows)
    fallback_rows = [r for r in rows if r["table"] == "fallback"]
    assert len(fallback_rows) == 2 * len(QTYPES) - (0 if ort_io.has_typed_ortvalues() else 2)
    if anchors.attach_fallbacks() is not None:
        assert all(r["exact"] == "=fallback" for r in fallback_rows)
    else:
        assert all("not measured" in r["note"] for r in fallback_rows)
    block_rows = [r for r in rows if r["table"] == "blocks"]
    assert {(r["type"], r["granularity"]) for r in block_rows} == {
        (name, layout) for name in ("bfp16", "mxfp4") for layout in config.BLOCK_LAYOUTS}
    for r in block_rows:  # against the fallback model, exact against it and the NumPy API
        assert r["extql"] > 0 and r["copy"] > 0 and r["exact"] == "=api =fallback", r
        assert r["op"] == ("BFP" if r["type"] == "bfp16" else "MX")
        assert r["anchor_name"] == "fallback model" and r["anchor"] > 0, r
    assert "| BFP | bfp16 | fallback model | nchw | 1 |" in text
    dpu_rows = [r for r in rows if r["table"] == "dpu"]  # --quick: one shape per op
    assert {(r["op"], r["granularity"], r["type"]) for r in dpu_rows} == {
        (op, shape, kind) for op, shape in (("IN", "1x64x56x56"), ("LSTM", "80x1x64 H128"))
        for kind in ("library", "numpy")}
    assert all(r["exact"] == "=api" and r["anchor"] > 0 for r in dpu_rows)
    assert "| IN | 1x64x56x56 | library | onnxruntime InstanceNormalization (float) |" in text
    assert "| block format >= 10x faster than its fallback model" in text
    assert "| instance norm <= 2x onnxruntime's float InstanceNormalization" in text
    md = out_md.read_text()
    assert md.startswith("# extql benchmark results")
    assert "extql bench --quick" in md and "copy kernel" in md


@pytest.mark.usefixtures("kernel_isa")
def test_options_select_what_runs(capsys):
    rc = cli.main(["bench", "--quick", "-q", "--tables", "ort", "--ops", "dq", "--types",
                   "uint16", "--granularity", "axis1", "--sizes", "4K", "--threads", "1", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| DQ | uint16 | onnxruntime DequantizeLinear | axis1 | 1 |" in text
    assert "| DQ | uint16 | onnxruntime DequantizeLinear | axis1 | 2 |" in text
    assert "| Q |" not in text and "## NumPy API" not in text and "| BFP |" not in text
    assert "| IN |" not in text


@pytest.mark.usefixtures("kernel_isa")
def test_block_options_select_the_block_rows(tmp_path):
    """--blocks and --block-layout pick the blocks table's rows; every
    configuration Quark writes is exact against the NumPy API."""
    out = tmp_path / "rows.json"
    rc = cli.main(["bench", "-q", "--tables", "blocks", "--sizes", "64K", "--threads", "1", "2",
                   "--repeat", "1", "--block-layout", "axis1", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    rows = doc["results"]
    assert {(r["type"], r["threads"]) for r in rows} == {
        (name, t) for name in config.BLOCK_CONFIGS for t in (1, 2)}
    assert all(r["granularity"] == "axis1" and r["exact"] == "=api =fallback" for r in rows)
    assert "--block-layout axis1" in doc["command"]


def _rows(tmp_path, *options: str) -> list[dict]:
    """The measured rows of a one-sample onnxruntime-table run at 64K."""
    out = tmp_path / "rows.json"
    rc = cli.main(["bench", "-q", "--tables", "ort", "--sizes", "64K", "--threads", "1",
                   "--repeat", "1", "--json", str(out), *options])
    assert rc == 0
    return [r for r in json.loads(out.read_text())["results"] if r["extql"] == r["extql"]]


@pytest.mark.usefixtures("kernel_isa")
@pytest.mark.parametrize("gran", ["nchw", "nchw7", "nchw32", "nchw56", "block32", "block128"])
def test_rows_are_exact(tmp_path, gran):
    """The NCHW middle-axis rows (axis 1 of (1, 64, H, W), (N, 256, 7, 7),
    (N, 256, 32, 32) and (N, 64, 56, 56)) and the blocked ones (block_size along the last axis of
    (n/4096, 4096)): every type checked bit for bit against onnxruntime's op
    (its own blocked op where it has one) or extql's NumPy API."""
    rows = _rows(tmp_path, "--granularity", gran)
    assert len(rows) == 2 * len(QTYPES) - (0 if ort_io.has_typed_ortvalues() else 2)
    assert all(r["granularity"] == gran and r["exact"] in ("=ort", "=api") for r in rows)
    if data.block_size(gran):
        assert all(r["anchor_name"] is None for r in rows
                   if r["type"] in ("float16", "bfloat16"))


def test_blocked_shapes():
    for gran in ("block32", "block128"):
        qt = QTYPES["int8"]
        block = data.block_size(gran)
        assert data.shape(1 << 16, gran) == (16, 4096)
        assert data.Data.scale(qt, gran, 1 << 16).shape == (16, 4096 // block)
        assert data.Data.zero_point(qt, gran, 1 << 16).shape == (16, 4096 // block)


@pytest.mark.usefixtures("kernel_isa")
def test_float16_rows_are_exact(tmp_path):
    """--float: quantize's x and scale, dequantize's scale and output in
    float16 / bfloat16, checked against the NumPy API (onnxruntime's own
    operator divides float16 in float32 for some types), against
    onnxruntime's QuantizeLinear / DequantizeLinear where it has a kernel."""
    rows = _rows(tmp_path, "--float", "float16", "bfloat16", "--types", "int8", "uint16",
                 "--granularity", "tensor", "nchw56", "block32")
    command = json.loads((tmp_path / "rows.json").read_text())["command"]
    assert "--float float16 bfloat16" in command
    floats = ["float16", "bfloat16"] if ort_io.has_typed_ortvalues() else ["float16"]
    assert sorted({r["float"] for r in rows}) == sorted(floats)
    assert len(rows) == 2 * 2 * 3 * len(floats)
    assert all(r["exact"] == "=api" for r in rows)
    f16 = [r for r in rows if r["float"] == "float16" and r["granularity"] != "block32"]
    assert all(r["anchor"] is not None for r in f16 if r["type"] == "int8"), \
        "onnxruntime's float16 QuantizeLinear / DequantizeLinear is the anchor"


def test_nchw_shapes():
    assert data.shape(1 << 24, "nchw") == (1, 64, 512, 512)
    assert data.shape(1 << 20, "nchw") == (1, 64, 128, 128)
    assert data.shape(1 << 16, "nchw") == (1, 64, 32, 32)
    assert data.shape(3 * 256, "nchw") == (1, 64, 3, 4)
    qt = QTYPES["int8"]
    assert data.Data.scale(qt, "nchw").shape == (64,)
    assert data.Data.zero_point(qt, "nchw").shape == (64,)


@pytest.mark.usefixtures("kernel_isa")
def test_fixed_nchw_shapes_come_nearest_the_size():
    """nchw7 / nchw32 / nchw56: (C, H, W) fixed, N the batch whose element count is
    nearest the size (at least 1); the inputs have that shape."""
    for gran, chw in (("nchw7", (256, 7, 7)), ("nchw32", (256, 32, 32)),
                      ("nchw56", (64, 56, 56))):
        per = int(np.prod(chw))
        for n in (1 << 16, 1 << 20, 1 << 24, 256):
            shp = data.shape(n, gran)
            assert shp[1:] == chw and shp[0] >= 1
            assert all(abs(k * per - n) >= abs(shp[0] * per - n) for k in range(1, shp[0] + 3))
            assert data.elements(n, gran) == shp[0] * per
        assert data.channels(gran) == chw[0]
        qt = QTYPES["uint16"]
        assert data.Data.scale(qt, gran).shape == (chw[0],)
        d = data.Data()
        assert d.input("Q", 1 << 16, qt, gran).shape == data.shape(1 << 16, gran)
        assert d.input("DQ", 1 << 16, qt, gran).shape == data.shape(1 << 16, gran)
    assert data.shape(1 << 24, "nchw7") == (1337, 256, 7, 7)
    assert data.shape(1 << 24, "nchw32") == (64, 256, 32, 32)
    assert data.shape(1 << 24, "nchw56") == (84, 64, 56, 56)


def test_parse_size():
    assert config.parse_size("64K") == 65536
    assert config.parse_size("16M") == 1 << 24
    assert config.parse_size("4096") == 4096
    for bad in ("abc", "100", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            config.parse_size(bad)


def test_time_interleaved_runs_every_function():
    from extql_bench.timing import time_interleaved

    calls = {"a": 0, "b": 0}

    def a():
        calls["a"] += 1

    def b():
        calls["b"] += 1

    ta, tb = time_interleaved([a, b], repeat=4, min_sample=1e-5)
    assert ta > 0 and tb > 0
    assert calls["a"] >= 2 + 4 and calls["b"] >= 2 + 4


def test_same_bits_any_nan():
    """Bit for bit, except that with any_nan a NaN equals any NaN (the
    block formats' fallback model need not keep a NaN's payload)."""
    a = np.array([1.0, np.nan, -0.0], np.float32)
    b = a.copy()
    b.view(np.uint32)[1] |= 1  # another NaN payload
    assert not runner.same_bits(a, b) and runner.same_bits(a, b, any_nan=True)
    c = np.array([1.0, np.nan, 0.0], np.float32)  # +0 for -0
    assert not runner.same_bits(a, c, any_nan=True)
    d = np.array([np.nan, 1.0, -0.0], np.float32)  # the NaN elsewhere
    assert not runner.same_bits(a, d, any_nan=True)


def test_ratio_text():
    assert runner.ratio_text(None) == "-"
    assert runner.ratio_text(1.234) == "1.23" and runner.ratio_text(0.1) == "0.10"
    assert runner.ratio_text(0.0048) == "0.0048"


def test_a_mismatch_is_a_failure(capsys):
    from extql_bench.cli import status

    bad = runner.Result("ort", "Q", "int8", "tensor", 65536, 1, 1e-5, exact="MISMATCH vs x")
    good = runner.Result("ort", "Q", "int8", "tensor", 65536, 1, 1e-5, exact="=ort")
    assert status([good]) == 0
    assert status([good, bad]) == 1
    assert "MISMATCH" in capsys.readouterr().err


def test_bench_runs_without_a_source_checkout(tmp_path):
    """An installed extql with no source checkout (EXTQL_BENCHMARKS names a
    directory without one): ``extql bench --quick`` runs every table as a
    real process, and the onnxruntime table leaves the copy column out,
    saying that it needs a checkout.  ``extql bench models``, which does
    need one, says where to get it: one line, exit status 2."""
    env = dict(os.environ, EXTQL_BENCHMARKS=str(tmp_path / "benchmarks"))
    report = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "extql", "bench", "--quick", "-q",
                           "--json", str(report)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "copy% not measured: the copy kernel is built from a source checkout" in proc.stdout
    assert "| op | type | anchor | gran. | thr | 64K ratio |" in proc.stdout
    rows = json.loads(report.read_text())["results"]
    assert {r["table"] for r in rows} == {"ort", "numpy", "fallback", "blocks", "dpu"}
    for table in ("ort", "blocks"):
        measured = [r for r in rows if r["table"] == table and r["extql"] == r["extql"]]
        assert measured and all(r["copy"] is None and "source checkout" in r["copy_note"]
                                and r["exact"] in ("=ort", "=api", "=api =fallback")
                                for r in measured)
    assert not (tmp_path / "benchmarks").exists()  # nothing was built there

    models = subprocess.run([sys.executable, "-m", "extql", "bench", "models", "--quick"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert models.returncode == 2 and models.stdout == ""
    lines = models.stderr.strip().splitlines()
    assert len(lines) == 1 and "source checkout" in lines[0], models.stderr


@pytest.mark.parametrize(("script", "row_starts", "rows_expected"), [
    # extql against Cast + QuantizeLinear: a row per type and granularity
    ("int32_input.py", ("| int8", "| uint16"), 4),
    # extql against the fallback functions: the same for int32 and float32 x
    ("int32_scales.py", ("| int32", "| float32"), 8),
])
def test_int32_scripts_run_exact(script, row_starts, rows_expected):
    """The int32 benchmark scripts run as processes and find both outputs
    bit-identical (a mismatch is exit status 1)."""
    bench_dir = os.environ["EXTQL_BENCHMARKS"]
    proc = subprocess.run(
        [sys.executable, os.path.join(bench_dir, script), "--sizes", "64K",
         "--threads", "1", "--repeat", "1", "--types", "int8", "uint16"],
        cwd=bench_dir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(row_starts)]
    assert len(rows) == rows_expected and not any("MISMATCH" in r for r in rows), proc.stdout


def test_models_folded_section_runs_exact(tmp_path):
    """``extql bench models --folded`` (whole_models.py): a block-format
    model of the zoo and a Quark-written one, weights folded by
    fold_constants against unfolded, outputs bit-identical, the weights'
    block nodes gone."""
    bench_dir = os.environ["EXTQL_BENCHMARKS"]
    fixture = os.path.join(os.path.dirname(__file__), "..", "data", "quark", "cnn_bfp16.onnx")
    out = tmp_path / "folded.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(bench_dir, "whole_models.py"), "--quick", "--variants",
         "--models", "bert", "--folded", "mxfp4", "--folded-files", fixture, "--repeat", "1",
         "--warmup", "1", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["rows"] == []
    rows = doc["folded"]
    assert [(r["model"], r["form"]) for r in rows] == [("bert", "mxfp4"),
                                                        ("cnn_bfp16.onnx", "file")]
    for r in rows:
        assert r["exact_bits"] and r["ms"]["folded"] > 0 and r["ms"]["unfolded"] > 0, r
        assert r["block_nodes"]["folded"] < r["block_nodes"]["unfolded"], r


def test_models_floor_replaces_every_pair(tmp_path):
    """``whole_models.py --floor``: the float16 ResNet's extql model with
    each activation Q->DQ pair replaced by one Abs node, timed beside the
    float model; no quantization node is left in it.  (The int variants get
    no floor; their models come from onnxruntime's quantize_static, which
    the oldest declared onnxruntime cannot run with a recent onnx.)"""
    bench_dir = os.environ["EXTQL_BENCHMARKS"]
    out = tmp_path / "floor.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(bench_dir, "whole_models.py"), "--quick", "--models",
         "resnet", "--variants", "float16", "--floor", "--repeat", "1", "--warmup", "1",
         "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["nodes_left"], row  # the extql model has its pairs ...
    assert row["floor_nodes_left"] == {}, row  # ... the floor model none
    assert row["floor_vs_float"] > 0 and row["ms"]["floor"] > 0, row


def test_bench_help_is_the_harness_help(tmp_path):
    """Also without a source checkout: the harness is installed with extql."""
    env = dict(os.environ, EXTQL_BENCHMARKS=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "extql.cli", "bench", "--help"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout and "--granularity" in proc.stdout


@pytest.mark.parametrize("fname", ["float32", "float16"])
@pytest.mark.parametrize("layout", list(config.BLOCK_LAYOUTS))
def test_block_copy_moves_the_bytes(layout, fname, kernel_isa):
    """BlockCopy (the blocks table's copy anchor) writes x's bytes into y,
    split over the pool as extql's block formats are, with ragged blocks."""
    import onnxruntime as ort

    from extql_bench.blocks import block_model

    o = Ort()
    rng = np.random.default_rng(3)
    for n, threads, block in [(256, 1, 8), (1 << 19, 2, 7), (1 << 19, 2, 32)]:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.register_custom_ops_library(copy_library.library_path())
        model = block_model(o, "BlockCopy", "com.amd.quark.bench", {"block_size": block}, layout)
        for value in (model.graph.input[0], model.graph.output[0]):  # float32 or float16
            value.type.tensor_type.elem_type = 1 if fname == "float32" else 10
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        x = rng.standard_normal(data.shape(n, layout)).astype(fname)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y.view(f"u{x.itemsize}"), x.view(f"u{x.itemsize}"))


@pytest.mark.parametrize("fname", ["float32", "float16"])
@pytest.mark.parametrize("name", list(QTYPES))
def test_copy_ops_move_the_bytes(name, fname, kernel_isa):
    """QuantizeCopy / DequantizeCopy (the copy anchor's library) write the op's
    output bytes with no arithmetic: the low bytes of each float32 / float16
    element, or each element zero-extended (or its low bytes, for a float16
    output); at sizes around the vector width, split over the
    pool, and with an output large enough for non-temporal stores.  (Where
    onnxruntime cannot bind bfloat16 from Python, a bfloat16 output is widened
    in the graph and a bfloat16 input becomes an initializer.)"""
    import onnxruntime as ort

    assert copy_library.set_isa(kernel_isa) == kernel_isa  # the variant it stands for
    qt = QTYPES[name]
    o = Ort()
    d = data.Data(5)
    size = qt.dtype.itemsize
    fdt = np.dtype(fname)  # the float side: x of quantize, y of dequantize
    fsize = fdt.itemsize
    scale, zp = d.scale(qt, "tensor", fdt=fdt), d.zero_point(qt, "tensor")
    stream_n = (16 << 20) // size + 5  # an output of at least 16 MiB when quantizing
    for n, threads in [(1, 1), (31, 1), (33, 2), (1000, 1), (70_001, 2), (300_001, 2),
                       (stream_n, 2)]:
        def sess(model, threads=threads):
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.register_custom_ops_library(copy_library.library_path())
            return ort.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])

        x = d.x(n, fdt)
        model, feeds = bfloat16_io_fallback(o.model("copy", "Q", qt, "tensor", scale, zp),
                                            {"x": x})
        (y,) = run(sess(model), feeds, [qt.dtype], [x.shape])
        bits = x.view(f"u{fsize}").astype(np.uint32)
        want = (bits & np.uint32((1 << (8 * size)) - 1)).astype(f"u{size}")
        np.testing.assert_array_equal(y.view(f"u{size}"), want)

        q = d.q(n, qt, "tensor", fdt)
        model, feeds = bfloat16_io_fallback(o.model("copy", "DQ", qt, "tensor", scale, zp),
                                            {"x": q})
        (out,) = run(sess(model), feeds, [fdt], [q.shape])
        wide = q.view(f"u{size}").astype(np.uint32)
        np.testing.assert_array_equal(
            out.view(f"u{fsize}"), (wide & np.uint32((1 << (8 * fsize)) - 1)).astype(f"u{fsize}"))
