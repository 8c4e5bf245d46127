"""Release engineering: the version, the metadata of the installed
distribution, the command line's entry points, and the agreement between the
places that name the supported versions (pyproject.toml, tox.ini)."""

from __future__ import annotations

import configparser
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import extql

ROOT = Path(__file__).resolve().parents[2]
META = md.metadata("extql")


def _requirements() -> list[Requirement]:
    return [Requirement(r) for r in md.requires("extql") or []]


def _extra_requirements(extra: str) -> dict[str, Requirement]:
    return {
        r.name: r
        for r in _requirements()
        if r.marker is not None and r.marker.evaluate({"extra": extra})
    }


def _run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m extql.cli ARGS`` from ``cwd``: not the repository root, where
    ``-m`` would import the source tree instead of the installed package."""
    return subprocess.run(
        [sys.executable, "-m", "extql.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_version_has_one_source():
    """extql._version is the single source: the package and the installed
    distribution's metadata agree, and it is a valid PEP 440 version."""
    from extql._version import __version__

    assert extql.__version__ == __version__
    assert md.version("extql") == __version__
    assert str(Version(__version__)) == __version__


def test_cli_version_prints_the_package_version(tmp_path):
    result = _run_cli(tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"extql {extql.__version__}"


def test_cli_info_reports_version_and_openmp(tmp_path):
    result = _run_cli(tmp_path, "info")
    assert result.returncode == 0, result.stderr
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())
    assert rows["extql"].strip() == extql.__version__
    assert rows["openmp"].startswith("yes" if extql.have_openmp() else "no")
    assert rows["threads"].split()[0] == str(extql.get_num_threads())


def test_console_script_is_declared():
    scripts = {ep.name: ep.value for ep in md.entry_points(group="console_scripts")}
    assert scripts.get("extql") == "extql.cli:main"


def test_licence_and_authors():
    assert META["License-Expression"] == "MIT"
    assert "LICENSE" in (META.get_all("License-File") or [])
    assert META["Author"] == "extql developers"
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_extras_are_declared():
    extras = set(META.get_all("Provides-Extra") or [])
    assert {"test", "docs", "onnx", "onnxruntime"} <= extras
    assert {"pytest", "onnx", "onnxruntime"} <= set(_extra_requirements("test"))
    assert {"sphinx", "furo"} <= set(_extra_requirements("docs"))
    assert {"onnx", "onnxscript"} <= set(_extra_requirements("onnx"))
    assert set(_extra_requirements("onnxruntime")) == {"onnxruntime"}


def test_no_extra_but_the_cpu_one_and_tests_chooses_an_onnxruntime_build():
    """onnxruntime, onnxruntime-gpu, -openvino, ... all provide the onnxruntime
    module and clash when two are installed: only the ``onnxruntime`` extra
    (and ``test``, for the CI) may require one, and nothing requires one
    without an extra."""
    base = {"extra": ""}
    for r in _requirements():
        if not r.name.startswith("onnxruntime"):
            continue
        chosen_by = {e for e in META.get_all("Provides-Extra") or []
                     if r.marker is not None and r.marker.evaluate({"extra": e})}
        assert r.marker is not None and not r.marker.evaluate(base), str(r)
        assert chosen_by <= {"onnxruntime", "test"}, (str(r), chosen_by)


def _python_classifiers() -> set[str]:
    pattern = re.compile(r"Programming Language :: Python :: (3\.\d+)$")
    return {m.group(1) for c in META.get_all("Classifier") or [] if (m := pattern.match(c))}


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def test_python_versions_agree_across_classifiers_tox_and_requires_python():
    """Each supported Python minor has a classifier and a tox env, and
    Requires-Python admits the oldest of them."""
    classified = _python_classifiers()
    env_list = _tox()["tox"]["env_list"]
    brace = re.search(r"^\s*py3\{([\d,]+)\}\s*$", env_list, re.M)
    assert brace, env_list
    tox_versions = {f"3.{minor}" for minor in brace.group(1).split(",")}
    assert classified == tox_versions == {"3.10", "3.11", "3.12", "3.13"}
    oldest = min(classified, key=Version)
    assert META["Requires-Python"] == f">={oldest}"


def test_oldest_onnxruntime_in_tox_matches_the_declared_minimum():
    """tox's [ort] oldest is the release the ortoldest envs install; it must
    satisfy the lower bound pyproject.toml declares and be of the same minor
    release (so that raising one without the other fails here)."""
    oldest = Version(_tox()["ort"]["oldest"])
    for extra in ("onnxruntime", "test"):
        requirement = _extra_requirements(extra)["onnxruntime"]
        lower = [s for s in requirement.specifier if s.operator == ">="]
        assert len(lower) == 1, (extra, str(requirement))
        bound = Version(lower[0].version)
        assert oldest in requirement.specifier, (extra, str(requirement), oldest)
        assert (oldest.major, oldest.minor) == (bound.major, bound.minor), (extra, oldest, bound)


@pytest.mark.parametrize("name", ["_kernels.pyx", "src/extql_kernels.h", "py.typed"])
def test_sources_are_installed_with_the_package(name):
    """The wheel carries the kernel sources and the C header (for C callers)."""
    assert (Path(extql.__file__).parent / name).is_file()


def test_every_subpackage_is_listed_for_the_wheel():
    """pyproject.toml names the packages explicitly: a subpackage left out of
    the list would be missing from the wheel."""
    import ast

    text = (ROOT / "pyproject.toml").read_text()
    setuptools = text[text.index("[tool.setuptools]"):]
    listed = ast.literal_eval(re.search(r"^packages = (\[.*\])$", setuptools, re.M).group(1))
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("extql", "extql_bench") for p in (ROOT / top).rglob("__init__.py")}
    assert set(listed) == found
