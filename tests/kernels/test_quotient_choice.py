"""EXTQL_QUOTIENT and the CPU's choice of how the quantize takes x / s.

The AVX2 / AVX-512 kernels take the 8/16-bit quotient (and the 32-bit one
with the zero point 0) by the division instruction on CPUs whose divider
outruns the reciprocal and its corrections (AMD's from family 19h), and by
the corrections elsewhere; tests/kernels/test_division.py checks that both
give the division's bits.  Each case is a child process, because the choice
is made at the first kernel call of a process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from extql import _kernels

#: Runs a kernel (which makes the choice) twice, then prints the method.
CHILD = (
    "import numpy as np, extql\n"
    "from extql import _kernels\n"
    "x = np.linspace(-3, 3, 100000, dtype=np.float32)\n"
    "for _ in range(2):\n"
    "    extql.quantize_linear(x, np.float32(0.1), np.int8(0))\n"
    "print(_kernels.quotient())\n"
)


def _run(value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("EXTQL_QUOTIENT", None)
    if value is not None:
        env["EXTQL_QUOTIENT"] = value
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=120, check=True)


def _cpu_choice() -> str:
    """The method for this CPU, read from /proc/cpuinfo (not from CPUID, as
    the library reads it)."""
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
def test_unset_or_empty_takes_the_cpus_choice(value):
    r = _run(value)
    assert r.stdout.strip() == _cpu_choice()
    assert "extql" not in r.stderr


@pytest.mark.parametrize("name", ["division", "fma"])
def test_a_named_method_runs_without_a_word(name):
    r = _run(name)
    assert r.stdout.strip() == name
    assert "extql" not in r.stderr


def test_an_unknown_method_warns_once_naming_the_one_that_runs():
    r = _run("newton")
    best = _run(None).stdout.strip()
    assert r.stdout.strip() == best
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
