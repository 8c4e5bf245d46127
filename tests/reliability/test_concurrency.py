"""Concurrency under load, each scenario in a child process
(tests/stress_driver.py) so that a deadlock cannot hang the test run: the
child joins its threads with a timeout and reports stuck ones, and the
child itself runs under a timeout.

Results must be bit-exact (the driver compares every output with
tests/contract.py) and every thread must make progress.  Speed is not
asserted here; benchmarks/concurrency.py reports the throughput figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Child processes run the kernels: once, on the variant the CPU picks (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

# tests/: the child process's driver script and the helpers it imports.
TESTS = Path(__file__).resolve().parents[1]
SECONDS = float(os.environ.get("EXTQL_STRESS_SECONDS", "1.5"))


def drive(kernel_isa: str, scenario: str, *args: str, env: dict | None = None,
          grace: float = 60.0, timeout: float = 300.0) -> tuple[int, dict, str]:
    child_env = dict(os.environ if env is None else env)
    child_env.pop("EXTQL_ISA", None)
    if kernel_isa == "baseline":
        child_env["EXTQL_ISA"] = "baseline"
    proc = subprocess.run(
        [sys.executable, str(TESTS / "stress_driver.py"), scenario, "--seconds", str(SECONDS),
         "--grace", str(grace), *args],
        capture_output=True, text=True, timeout=timeout, cwd=str(TESTS), env=child_env,
    )
    report = {}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            report = json.loads(line)
            break
    return proc.returncode, report, proc.stderr[-4000:]


def check(rc: int, report: dict, stderr: str, threads: int) -> None:
    assert report, f"no report (exit code {rc})\n{stderr}"
    assert not report["stuck"], f"threads stuck: {report['stuck']}\n{stderr}"
    assert rc == 0, f"exit code {rc}\n{stderr}"
    assert report["errors"] == [], "\n".join(report["errors"])
    assert len(report["per_thread"]) == threads
    assert all(n > 0 for n in report["per_thread"]), f"a thread made no progress: {report}"


@pytest.mark.parametrize("threads,intra_op", [(8, 2), (16, 1)])
def test_one_session_shared_by_many_threads(kernel_isa, threads, intra_op):
    rc, report, err = drive(kernel_isa, "shared_session", "--threads", str(threads),
                            "--intra-op", str(intra_op))
    check(rc, report, err, threads)


def test_many_sessions_created_run_destroyed_at_once(kernel_isa):
    rc, report, err = drive(kernel_isa, "many_sessions", "--threads", "8")
    check(rc, report, err, 8)
    assert report["sessions"] >= 8


@pytest.mark.parametrize("env_threads", [None, "3"])
def test_numpy_api_from_many_threads(kernel_isa, env_threads):
    env = dict(os.environ)
    env.pop("EXTQL_NUM_THREADS", None)
    if env_threads:
        env["EXTQL_NUM_THREADS"] = env_threads
    rc, report, err = drive(kernel_isa, "numpy_threads", "--threads", "8", env=env)
    check(rc, report, err, 8)


def test_numpy_api_and_sessions_together(kernel_isa):
    rc, report, err = drive(kernel_isa, "mixed", "--threads", "8")
    check(rc, report, err, 8)


def test_a_stuck_thread_is_reported(kernel_isa):
    """The driver's own test: a thread that never returns is named, with
    the stacks, and the child exits with code 3 instead of hanging."""
    rc, report, err = drive(kernel_isa, "selftest_stuck", "--threads", "2", "--seconds", "0.2",
                            grace=1.0,
                            timeout=60)
    assert rc == 3
    assert report["stuck"] == ["worker-0"]
    assert "Thread" in err and "in work" in err  # the stacks of the threads
