"""Every exactness test runs on every instruction-set variant.

tests/conftest.py parametrises the fixture ``kernel_isa`` over the variants
this build and CPU have (``_kernels.available_isas()``) in the folders of
its ``SWEPT`` (kernels, operators) and over the CPU's own variant elsewhere,
and fails a test that runs the kernels -- through the NumPy API, the C entry
points' Python wrappers or the onnxruntime library -- without requesting
it.  Checked here on throw-away test files run by pytest with that conftest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from extql import _kernels

TESTS = Path(__file__).resolve().parents[1]

ASKS = '''
import numpy as np
import pytest
import extql
from extql import _kernels

pytestmark = pytest.mark.usefixtures("kernel_isa")

def test_asks():
    assert extql.quantize_linear(np.float32([1.5]), np.float32(1), np.int8(0)).tolist() == [2]
    print("ISA", _kernels.isa())
'''

FORGETS = '''
import numpy as np
import extql

def test_forgets():
    extql.quantize_linear(np.float32([1.5]), np.float32(1), np.int8(0))

def test_registers():
    import onnxruntime as ort
    extql.register(ort.SessionOptions())

def test_does_not_run_them():
    assert extql.DOMAIN == "com.amd.quark"
'''


def _pytest(tmp_path: Path, code: str, folder: str = "kernels"
            ) -> subprocess.CompletedProcess[str]:
    path = tmp_path / folder / "test_throwaway.py"
    path.parent.mkdir()
    path.write_text(code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("EXTQL_TEST_ISAS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "-s",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


def test_an_exactness_test_runs_on_every_variant(tmp_path):
    done = _pytest(tmp_path, ASKS, "operators")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = sorted(re.findall(r"ISA (\w+)", done.stdout))
    assert ran == sorted(_kernels.available_isas())


def test_other_kernel_tests_run_on_the_cpus_variant(tmp_path):
    done = _pytest(tmp_path, ASKS, "ort")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    _kernels.set_isa(None)
    assert re.findall(r"ISA (\w+)", done.stdout) == [_kernels.isa()]


def test_a_test_that_runs_the_kernels_without_asking_fails(tmp_path):
    done = _pytest(tmp_path, FORGETS)
    assert done.returncode == 1, done.stdout[-2000:]
    for name in ("test_forgets", "test_registers"):
        assert (f"test_throwaway.py::{name} runs extql's kernels: request the fixture "
                "kernel_isa") in done.stdout, done.stdout[-3000:]
    assert "test_does_not_run_them runs" not in done.stdout
    assert "3 passed, 2 errors" in done.stdout, done.stdout[-1000:]
