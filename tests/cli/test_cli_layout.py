"""The command line's layout: the package :mod:`extql.cli`, one module per
concern, every command reachable and every module shipped."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import extql
import extql.cli

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "extql"
CLI = PACKAGE / "cli"

# The commands of the ``extql`` command line (README, docs/guide/cli.rst).
COMMANDS = ["info", "check", "attach", "inline", "lower", "run", "optimize", "fold", "analyze",
            "bench"]
# The largest a module may grow before it is split by concern (issue 12).
MAX_LINES = 600


def _cli_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(extql.cli.__path__, "extql.cli."))


def test_the_command_line_is_one_package():
    """No top-level cli_*.py or bench.py module beside the package."""
    stray = sorted(p.name for p in PACKAGE.glob("*.py")
                   if p.stem.startswith("cli") or p.stem == "bench")
    assert stray == []
    assert (CLI / "__init__.py").is_file() and (CLI / "__main__.py").is_file()


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_no_cli_module_is_a_grab_bag(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines < MAX_LINES, f"{path.name}: {lines} lines; split it by concern"


def test_every_cli_module_imports_and_every_command_module_registers():
    for name in _cli_modules():
        importlib.import_module(name)
    assert set(extql.cli.COMMAND_MODULES) <= set(_cli_modules())
    for name in extql.cli.COMMAND_MODULES:
        assert callable(importlib.import_module(name).register), name


def test_help_lists_every_command_in_a_real_process(tmp_path):
    """``python -m extql --help`` (run outside the source tree) names each
    command, in the documented order, and nothing else."""
    proc = subprocess.run([sys.executable, "-m", "extql", "--help"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = re.findall(r"^    (\w+)\s", proc.stdout, flags=re.MULTILINE)
    assert listed == COMMANDS, proc.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_its_help(command, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "extql.cli", command, "--help"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: extql {command}"), proc.stdout[:200]


def test_every_subpackage_is_listed_for_the_wheel():
    """pyproject.toml names its packages one by one: a subpackage missing
    there would be absent from the wheel."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r"^packages\s*=\s*\[([^\]]*)\]", text, flags=re.MULTILINE)
    assert match is not None
    listed = set(re.findall(r'"([\w.]+)"', match.group(1)))
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in PACKAGE.rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk <= listed, sorted(on_disk - listed)


def test_bench_finds_the_checkouts_benchmarks_without_the_variable(monkeypatch):
    """Unset EXTQL_BENCHMARKS: ``extql bench models`` looks in the checkout
    extql runs from, the ``benchmarks`` directory beside the ``extql``
    package (none when extql is installed from a wheel)."""
    from extql.cli import bench

    monkeypatch.delenv("EXTQL_BENCHMARKS", raising=False)
    beside = Path(extql.__file__).resolve().parent.parent / "benchmarks"
    found = bench.benchmarks_dir()
    if (beside / "whole_models.py").is_file():
        assert found is not None and found.resolve() == beside
    else:
        assert found is None
