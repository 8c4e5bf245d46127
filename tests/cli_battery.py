"""The command line under a user's mistakes: a small Quark-form model, byte
mutations of it, and a driver that runs many ``extql`` command lines in one
process.

:func:`quark_model` is a valid model in the form AMD Quark writes (ai.onnx
opset 17, IR 8, extra opset imports, ``com.microsoft`` Q/DQ for int8,
weights stored quantized behind a DequantizeLinear with ``axis=0``, an int32
bias with a scale of shape [1] and a scalar zero point that is not 0, and
Extended nodes for the types Quark keeps: bfloat16 (scale 1, zero point 0)
and uint32).  :func:`mutate` damages its bytes (seeded).

The driver (``python cli_battery.py RESULTS``) reads one JSON list of
command lines per line on stdin, runs each through ``extql.cli.main``
in-process with stdout and stderr captured and every exception caught, and
appends to RESULTS a ``{"begin": i}`` line before and a ``{"end": i, "rc":
..., "out": ..., "err": ..., "escaped": ...}`` line after each, flushed, so
that a crash or a hang is pinned on the command line that was running (the
last "begin" without its "end").  RESULTS is a file, not stdout, so that
anything a library writes to the file descriptors directly cannot garble it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import traceback

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DOMAIN = "com.amd.quark"
MS = "com.microsoft"


def _t(name: str, value) -> onnx.TensorProto:
    value = np.asarray(value)
    if value.dtype == np.dtype(ml_dtypes.bfloat16):
        return helper.make_tensor(name, TensorProto.BFLOAT16, value.shape,
                                  value.view(np.uint16).tobytes(), raw=True)
    return numpy_helper.from_array(value, name)


def quark_model() -> onnx.ModelProto:
    """A small valid model as Quark writes it (module docstring); x: float32 [1, 4]."""
    rng = np.random.default_rng(7)
    inits = [
        _t("x_scale", np.float32(0.05)), _t("x_zp", np.int8(0)),
        _t("w_q", rng.integers(-100, 100, (3, 4)).astype(np.int8)),
        _t("w_scale", np.array([0.01, 0.02, 0.03], np.float32)),
        _t("w_zp", np.zeros(3, np.int8)),
        _t("b_q", np.array([100, -200, 300], np.int32)),
        _t("b_scale", np.array([0.001], np.float32)), _t("b_zp", np.int32(7)),
        _t("one", np.float32(1.0)), _t("bf_zp", np.zeros((), ml_dtypes.bfloat16)),
        _t("u_scale", np.float32(0.002)), _t("u_zp", np.uint32(2**31)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], domain=MS,
                         name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"], domain=MS,
                         name="x_dq"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], domain=MS,
                         name="w_dq", axis=0),
        helper.make_node("ExtendedDequantizeLinear", ["b_q", "b_scale", "b_zp"], ["b"],
                         domain=DOMAIN, name="b_dq"),
        helper.make_node("Gemm", ["xd", "w", "b"], ["y"], name="gemm", transB=1),
        helper.make_node("ExtendedQuantizeLinear", ["y", "one", "bf_zp"], ["ybf"],
                         domain=DOMAIN, name="y_q_bf16"),
        helper.make_node("ExtendedDequantizeLinear", ["ybf", "one", "bf_zp"], ["yd"],
                         domain=DOMAIN, name="y_dq_bf16"),
        helper.make_node("ExtendedQuantizeLinear", ["yd", "u_scale", "u_zp"], ["yu"],
                         domain=DOMAIN, name="y_q_u32"),
        helper.make_node("ExtendedDequantizeLinear", ["yu", "u_scale", "u_zp"], ["out"],
                         domain=DOMAIN, name="y_dq_u32"),
    ]
    graph = helper.make_graph(
        nodes, "quark_small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3])],
        inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1),
        helper.make_opsetid(MS, 1), helper.make_opsetid("ai.onnx.ml", 3),
        helper.make_opsetid("com.vai.quantize", 1)], producer_name="quark")


def mutate(data: bytes, seed: int) -> bytes:
    """``data`` damaged in one of six ways chosen by ``seed``: flipped bits, a
    byte overwritten, truncated, a range deleted, a range repeated, random
    bytes inserted."""
    rng = np.random.default_rng(seed)
    buf = bytearray(data)
    kind = seed % 6
    n = len(buf)
    if kind == 0:
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(0, n))
            buf[i] ^= 1 << int(rng.integers(0, 8))
    elif kind == 1:
        buf[int(rng.integers(0, n))] = int(rng.integers(0, 256))
    elif kind == 2:
        del buf[int(rng.integers(1, n)):]
    elif kind == 3:
        i = int(rng.integers(0, n))
        del buf[i:i + int(rng.integers(1, 16))]
    elif kind == 4:
        i = int(rng.integers(0, n))
        buf[i:i] = buf[i:i + int(rng.integers(1, 32))]
    else:
        i = int(rng.integers(0, n))
        buf[i:i] = rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8).tobytes()
    return bytes(buf)


@contextlib.contextmanager
def _captured_fd(fd: int, sink):
    """Point file descriptor ``fd`` at the file ``sink`` for the block, so
    that what libraries write to it directly (onnxruntime's log) is seen."""
    saved = os.dup(fd)
    os.dup2(sink.fileno(), fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _run_one(argv: list[str]) -> dict:
    from extql import cli

    out, err = io.StringIO(), io.StringIO()
    escaped = None
    rc = None
    with tempfile.TemporaryFile("w+") as fd_out, tempfile.TemporaryFile("w+") as fd_err:
        with _captured_fd(1, fd_out), _captured_fd(2, fd_err):
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    rc = cli.main(argv)
            except SystemExit as exc:  # argparse's own exits
                rc = exc.code if isinstance(exc.code, int) else 2
            except BaseException as exc:  # noqa: BLE001 - the crash guard: what escaped main()
                escaped = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        fd_out.seek(0)
        fd_err.seek(0)
        return {"rc": rc, "out": fd_out.read() + out.getvalue(),
                "err": fd_err.read() + err.getvalue(), "escaped": escaped}


def driver(results_path: str) -> int:
    """Run the command lines read from stdin (module docstring)."""
    with open(results_path, "a", encoding="utf-8") as results:
        for i, line in enumerate(sys.stdin):
            argv = json.loads(line)
            results.write(json.dumps({"begin": i, "argv": argv}) + "\n")
            results.flush()
            result = _run_one(argv)
            results.write(json.dumps({"end": i, **result}) + "\n")
            results.flush()
    return 0


if __name__ == "__main__":
    sys.exit(driver(sys.argv[1]))
