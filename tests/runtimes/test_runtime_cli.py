"""``extql run --runtime openvino|tract`` as a user runs it: a process, its
exit status and what it prints, on models AMD Quark wrote.  Run by the tox
envs ``openvino`` and ``tract`` (see test_other_runtimes.py)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.fallback]

QUARK = Path(__file__).resolve().parent.parent / "data" / "quark"
_WANTED = [n for n in os.environ.get("EXTQL_RUNTIMES", "").split(",") if n]
HERE = [name for name in ("openvino", "tract")
        if name in _WANTED or importlib.util.find_spec(name) is not None]


def _run(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "extql", "run", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("runtime", HERE)
def test_an_exact_model_compares_equal(runtime, tmp_path):
    proc = _run(QUARK / "cnn_a16w8.onnx", "--runtime", runtime, "--compare-fallback",
                "--save-outputs", tmp_path / "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"all \d+ output\(s\) identical, native kernels vs fallbacks in {runtime}",
                     proc.stdout), proc.stdout
    assert "warning" not in proc.stderr
    assert (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("runtime", HERE)
def test_the_nodes_a_runtime_breaks_are_named(runtime, tmp_path):
    """uint32 dequantize of values of 2**31 or more: wrong in both runtimes;
    each node that differs is named with the table's cause, exit status 1."""
    proc = _run(QUARK / "cnn_au32wu32.onnx", "--runtime", runtime, "--compare-fallback",
                cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"native and fallbacks in {runtime} DIFFER" in proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("  Extended")]
    assert lines and all("[known: " in line for line in lines), proc.stdout
    assert "uint32 dequantize: " in proc.stderr  # warned before it ran


@pytest.mark.parametrize("runtime", [r for r in HERE if r == "tract"])
def test_a_model_the_runtime_cannot_load_is_a_clear_failure(runtime, tmp_path):
    proc = _run(QUARK / "cnn_bf16.onnx", "--runtime", runtime, cwd=tmp_path)
    assert proc.returncode == 1
    assert "tract cannot run the inlined model" in proc.stdout
    assert "Bfloat16" in proc.stdout and "Stack backtrace" not in proc.stdout
