"""The ``extql`` command line and the thread-count settings."""

from __future__ import annotations

import os
import re

import pytest
from childproc import run_python

import extql
from extql import _kernels, cli


def test_info_reports_versions_openmp_and_threads(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^extql\s+{re.escape(extql.__version__)}$", out, re.M)
    assert re.search(r"^openmp\s+(yes|no)", out, re.M)
    assert re.search(rf"^threads\s+{extql.get_num_threads()} ", out, re.M)
    assert re.search(rf"^kernels\s+{_kernels.isa()} ", out, re.M)


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert extql.__version__ in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "usage: extql" in capsys.readouterr().out


def _threads_in_child(env_value: str | None) -> int:
    env = dict(os.environ)
    env.pop("EXTQL_NUM_THREADS", None)
    if env_value is not None:
        env["EXTQL_NUM_THREADS"] = env_value
    out = run_python("-c", "import extql; print(extql.get_num_threads())", env=env)
    return int(out.stdout)


def test_environment_variable_sets_threads():
    default = _threads_in_child(None)
    assert default >= 1
    assert _threads_in_child("3") == 3
    assert _threads_in_child("1") == 1
    # Nonsense falls back to the default rather than breaking the kernels.
    assert _threads_in_child("zero") == default
    assert _threads_in_child("-2") == default


def test_set_num_threads_overrides_and_resets():
    default = extql.get_num_threads()
    extql.set_num_threads(5)
    try:
        assert extql.get_num_threads() == 5
    finally:
        extql.set_num_threads(None)
    assert extql.get_num_threads() == default


def test_console_script_runs():
    out = run_python("-m", "extql.cli", "info")
    assert "openmp" in out.stdout


def test_environment_variable_forces_the_baseline_kernels():
    env = dict(os.environ, EXTQL_ISA="baseline")
    out = run_python("-c", "from extql import _kernels; print(_kernels.isa())", env=env)
    assert out.stdout.strip() == "baseline"
