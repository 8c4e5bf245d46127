"""The kernels' run-time choices and the variables that force them.

* EXTQL_ISA: the variant it names runs when this build and CPU have it; when
  they do not, the best variant runs and stderr says which, once.
* EXTQL_QUOTIENT: how the AVX2 / AVX-512 quantize takes x / s -- by the
  division instruction on CPUs whose divider outruns the reciprocal and its
  corrections (AMD's from family 19h), by the corrections elsewhere
  (tests/kernels/test_division.py checks that both give the division's
  bits); a value that names neither: the CPU's choice, and a warning.

Each case is a child process, because a choice is made at the first kernel
call of a process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from extql import _kernels

#: Runs a kernel (which makes the choices) twice, then prints the variant
#: and the quotient method.
CHILD = (
    "import numpy as np, extql\n"
    "from extql import _kernels\n"
    "x = np.linspace(-3, 3, 100000, dtype=np.float32)\n"
    "for _ in range(2):\n"
    "    extql.quantize_linear(x, np.float32(0.1), np.int8(0))\n"
    "print(_kernels.isa())\n"
    "print(_kernels.quotient())\n"
)
VARIABLES = ("EXTQL_ISA", "EXTQL_QUOTIENT")


class Child:
    """A child's choices (isa, quotient) and its stderr."""

    def __init__(self, variable: str, value: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
        if value is not None:
            env[variable] = value
        r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                           text=True, timeout=120, check=True)
        self.isa, self.quotient = r.stdout.split()
        self.stderr = r.stderr


def _run(value: str | None) -> Child:
    return Child("EXTQL_ISA", value)


def _best() -> str:
    return _kernels.available_isas()[-1]


@pytest.mark.parametrize("name", _kernels.available_isas())
def test_an_available_variant_runs_without_a_word(name):
    r = _run(name)
    assert r.isa == name
    assert "extql" not in r.stderr


@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_runs_the_best_variant(value):
    r = _run(value)
    assert r.isa == _best()
    assert "extql" not in r.stderr


def test_an_unknown_name_warns_once_naming_the_variant_that_runs():
    r = _run("avx1024")
    assert r.isa == _best()
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
    assert r.isa == _best()
    lines = [line for line in r.stderr.splitlines() if "EXTQL_ISA" in line]
    assert lines == [f"extql: warning: EXTQL_ISA={name}: this build or this CPU lacks the "
                     f"{name} kernels; the {_best()} kernels run"]


def _cpu_quotient() -> str:
    """The quotient method for this CPU, read from /proc/cpuinfo (the library
    reads CPUID)."""
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    amd = fields.get("vendor_id") == "AuthenticAMD"
    return "division" if amd and int(fields.get("cpu family", "0")) >= 0x19 else "fma"


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads /proc/cpuinfo")
@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_quotient_is_the_cpus_choice(value):
    r = Child("EXTQL_QUOTIENT", value)
    assert r.quotient == _cpu_quotient()
    assert "extql" not in r.stderr


@pytest.mark.parametrize("name", ["division", "fma"])
def test_a_named_quotient_method_runs_without_a_word(name):
    r = Child("EXTQL_QUOTIENT", name)
    assert r.quotient == name
    assert "extql" not in r.stderr


def test_an_unknown_quotient_method_warns_once_naming_the_one_that_runs():
    r = Child("EXTQL_QUOTIENT", "newton")
    best = Child("EXTQL_QUOTIENT", None).quotient
    assert r.quotient == best
    lines = [line for line in r.stderr.splitlines() if "EXTQL_QUOTIENT" in line]
    assert lines == [f"extql: warning: EXTQL_QUOTIENT=newton is not a quotient method "
                     f"(division, fma); {best} runs"]


def test_set_quotient_forces_and_restores():
    before = _kernels.quotient()
    try:
        for name in ("division", "fma"):
            _kernels.set_quotient(name)
            assert _kernels.quotient() == name
        with pytest.raises(ValueError, match="unknown quotient method 'newton'"):
            _kernels.set_quotient("newton")
    finally:
        _kernels.set_quotient(None)
    assert _kernels.quotient() == before
