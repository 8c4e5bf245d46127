"""EXTQL_ISA: the variant it names runs when this build and CPU have it; when
they do not, the best variant runs and stderr says which, once.

Each case is a child process, because the choice is made at the first kernel
call of a process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from extql import _kernels

#: Runs a kernel (which makes the choice) twice, then prints the variant.
CHILD = (
    "import numpy as np, extql\n"
    "from extql import _kernels\n"
    "x = np.linspace(-3, 3, 100000, dtype=np.float32)\n"
    "for _ in range(2):\n"
    "    extql.quantize_linear(x, np.float32(0.1), np.int8(0))\n"
    "print(_kernels.isa())\n"
)


def _run(value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("EXTQL_ISA", None)
    if value is not None:
        env["EXTQL_ISA"] = value
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=120, check=True)


def _best() -> str:
    return _kernels.available_isas()[-1]


@pytest.mark.parametrize("name", _kernels.available_isas())
def test_an_available_variant_runs_without_a_word(name):
    r = _run(name)
    assert r.stdout.strip() == name
    assert "extql" not in r.stderr


@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_runs_the_best_variant(value):
    r = _run(value)
    assert r.stdout.strip() == _best()
    assert "extql" not in r.stderr


def test_an_unknown_name_warns_once_naming_the_variant_that_runs():
    r = _run("avx1024")
    assert r.stdout.strip() == _best()
    lines = [line for line in r.stderr.splitlines() if "EXTQL_ISA" in line]
    assert lines == [f"extql: warning: EXTQL_ISA=avx1024 is not a kernel variant "
                     f"({', '.join(_kernels._isa_names().values())}); "
                     f"the {_best()} kernels run"]


@pytest.mark.parametrize("name", [n for n in _kernels._isa_names().values()
                                  if n not in _kernels.available_isas()]
                         or [pytest.param("none", marks=pytest.mark.skip(
                             reason="this CPU runs every variant of this build"))])
def test_a_variant_this_cpu_lacks_warns_naming_the_one_that_runs(name):
    r = _run(name)
    assert r.stdout.strip() == _best()
    lines = [line for line in r.stderr.splitlines() if "EXTQL_ISA" in line]
    assert lines == [f"extql: warning: EXTQL_ISA={name}: this build or this CPU lacks the "
                     f"{name} kernels; the {_best()} kernels run"]
