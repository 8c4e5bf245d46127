"""extql beside whichever onnxruntime build provides the ``onnxruntime``
module (onnxruntime, onnxruntime-gpu, -openvino, -directml, -qnn, -rocm,
-vitisai): ``extql info`` names the distribution it found, two of them are
named as a clash, and every "onnxruntime is missing" message says how to get
one, not only the CPU package.

The real thing (pip installing ``extql[onnx]`` after onnxruntime-openvino)
is checked on the built wheel by ``tools/check_wheel.py`` (``tox -e wheel``);
here the distributions pip would install are stood in for by their metadata
on ``sys.path``, which ``importlib.metadata`` reads as it reads pip's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from cli_battery import quark_model

from extql import ort as extql_ort

TIMEOUT = 120
# A Python without the onnxruntime module (onnx and onnxscript importable).
NO_ORT = (
    "import sys\n"
    "sys.modules['onnxruntime'] = None\n"
    "from extql.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _fake_distribution(root: Path, name: str, version: str) -> None:
    """The metadata pip leaves for a distribution whose top-level module is
    ``onnxruntime`` (as every onnxruntime build's wheel has it)."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text("onnxruntime\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n")


def test_the_installed_distribution_is_named():
    """This environment's onnxruntime (the test extra installs the CPU
    package) is found from its files, with its version."""
    found = dict(extql_ort.onnxruntime_distributions())
    assert found.get("onnxruntime") == ort.__version__, found
    row = dict(extql_ort.info_rows())["onnxruntime"]
    assert row == f"{ort.__version__} (onnxruntime)"


@pytest.mark.parametrize("name", ["onnxruntime-openvino", "onnxruntime-gpu",
                                  "onnxruntime-vitisai"])
def test_another_build_beside_the_cpu_package_is_named_as_a_clash(tmp_path, monkeypatch, name):
    """A second distribution of the module: both are named, with the advice
    to keep one (they overwrite each other's files)."""
    _fake_distribution(tmp_path, name, "1.24.1")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = dict(extql_ort.onnxruntime_distributions())
    assert found == {"onnxruntime": ort.__version__, name: "1.24.1"}
    row = dict(extql_ort.info_rows())["onnxruntime"]
    assert f"1.24.1 ({name})" in row and f"{ort.__version__} (onnxruntime)" in row
    assert "several distributions provide the onnxruntime module" in row


def test_info_json_names_the_distribution_and_the_standalone_library(tmp_path):
    """``extql info --json`` as a real process: the onnxruntime row names the
    distribution, and the standalone library has its row (its path, or why
    this build has none)."""
    proc = subprocess.run([sys.executable, "-m", "extql", "info", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)["info"]
    assert info["onnxruntime"] == f"{ort.__version__} (onnxruntime)"
    try:
        want = extql_ort.get_library_path(standalone=True)
    except FileNotFoundError:
        want = f"not in this build ({extql_ort.standalone_name()} is not beside the package)"
    assert info["standalone library"] == want


def _ways_to_get_onnxruntime(text: str) -> None:
    assert 'pip install "extql[onnxruntime]"' in text, text
    for build in extql_ort.ONNXRUNTIME_BUILDS:
        assert build in text, (build, text)


def test_a_command_without_onnxruntime_says_how_to_get_one(tmp_path):
    """``extql run`` where no onnxruntime is installed: one line, exit 2,
    naming the CPU extra and the other builds, not the [onnx] extra (onnx and
    onnxscript are there)."""
    proc = subprocess.run([sys.executable, "-c", NO_ORT, "run", "model.onnx"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT, env=dict(os.environ))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "needs onnxruntime, which is not installed" in proc.stderr
    assert "extql[onnx]" not in proc.stderr.replace("extql[onnxruntime]", "")
    _ways_to_get_onnxruntime(proc.stderr)


def test_info_without_onnxruntime_says_how_to_get_one(monkeypatch):
    """No distribution of the module and no module: the row says how to get one."""
    monkeypatch.setattr(extql_ort, "onnxruntime_distributions", lambda: [])
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    row = dict(extql_ort.info_rows())["onnxruntime"]
    assert row.startswith("not installed")
    _ways_to_get_onnxruntime(row)


def test_check_without_onnxruntime_says_it_did_not_load_the_model(tmp_path):
    """``extql check`` needs no onnxruntime, but says that it could not load
    the model there, and how to get one (a note: exit 0 for a good model)."""
    onnx.save(quark_model(), str(tmp_path / "good.onnx"))
    proc = subprocess.run([sys.executable, "-c", NO_ORT, "check", "good.onnx", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["problems"] == []
    (note,) = [n for n in doc["notes"] if "onnxruntime is not installed" in n]
    _ways_to_get_onnxruntime(note)
