"""What users and scripts expect of the command: ``python -m extql``,
``--json`` documents, exit statuses, a clear message without the [onnx]
extra, and no traceback whatever goes wrong inside a command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_battery import quark_model

import extql
from extql import cli

# Once, on the kernel variant the CPU picks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

TIMEOUT = 120

# A Python that behaves as if the [onnx] extra were not installed: importing
# onnx, onnxruntime or onnxscript (or any of their submodules) fails.
NO_ONNX = (
    "import sys\n"
    "for name in ('onnx', 'onnxruntime', 'onnxscript', 'onnx_ir'):\n"
    "    sys.modules[name] = None\n"
    "from extql.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def python(*args, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT, env=dict(os.environ))


def assert_no_traceback(proc) -> None:
    assert proc.returncode >= 0, f"signal {-proc.returncode}"
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("conventions")
    onnx.save(quark_model(), str(d / "good.onnx"))
    bad = quark_model()
    bad.graph.node[3].attribute.append(onnx.helper.make_attribute("axis", 5))  # b_dq
    bad.graph.initializer.remove(next(t for t in bad.graph.initializer if t.name == "b_scale"))
    bad.graph.initializer.append(onnx.numpy_helper.from_array(np.ones((2, 2), np.float32),
                                                              "b_scale"))
    onnx.save(bad, str(d / "bad.onnx"))
    np.savez(d / "in.npz", x=np.linspace(-3, 3, 4, dtype=np.float32).reshape(1, 4))
    return d


def test_python_dash_m_extql(models):
    version = python("-m", "extql", "--version", cwd=models)
    assert version.returncode == 0 and version.stdout.strip() == f"extql {extql.__version__}"
    info = python("-m", "extql", "info", cwd=models)
    assert info.returncode == 0 and "openmp" in info.stdout
    none = python("-m", "extql", cwd=models)
    assert none.returncode == 2 and "usage: extql" in none.stdout


def _json(proc) -> dict:
    assert_no_traceback(proc)
    doc = json.loads(proc.stdout)  # the whole of stdout is one document
    assert doc["exit_code"] == proc.returncode and doc["ok"] == (proc.returncode == 0)
    return doc


def test_json_documents(models):
    info = _json(python("-m", "extql", "info", "--json", cwd=models))
    assert info["command"] == "info" and info["info"]["extql"] == extql.__version__
    assert info["info"]["openmp"] in ("yes", "no (kernels run serially)")

    good = _json(python("-m", "extql", "check", "good.onnx", "--json", cwd=models))
    quantization = [n for n in quark_model().graph.node
                    if n.domain in ("com.amd.quark", "com.vai.quantize")
                    or (n.domain == "com.microsoft"
                        and n.op_type in ("QuantizeLinear", "DequantizeLinear"))]
    assert good["ok"] and good["quantization_nodes"] == len(quantization) >= 5
    assert good["problems"] == []

    bad = _json(python("-m", "extql", "check", "bad.onnx", "--json", cwd=models))
    assert bad["exit_code"] == 1 and not bad["ok"]
    assert any("b_dq" in p and "scalar or 1-D" in p for p in bad["problems"]), bad

    missing = _json(python("-m", "extql", "check", "nope.onnx", "--json", cwd=models))
    assert missing["exit_code"] == 2 and "nope.onnx: no such file" in missing["error"]

    ran = _json(python("-m", "extql", "run", "good.onnx", "--inputs", "in.npz",
                       "--compare-fallback", "--json", "--save-outputs", "o.npz", cwd=models))
    assert ran["ok"] and ran["outputs"] == {"out": {"dtype": "float32", "shape": [1, 3],
                                                   "nan": 0}}
    assert ran["fallback_agrees"] is True and ran["saved"] == "o.npz"

    failed = _json(python("-m", "extql", "run", "good.onnx", "--inputs", "nope.npz", "--json",
                          cwd=models))
    assert failed["exit_code"] == 2 and "nope.npz" in failed["error"]


@pytest.mark.parametrize("argv", [
    ["check", "good.onnx"], ["run", "good.onnx"], ["attach", "good.onnx", "o.onnx"],
    ["inline", "good.onnx", "o.onnx"], ["lower", "good.onnx", "o.onnx"],
    ["check", "good.onnx", "--json"], ["analyze", "good.onnx", "good.onnx"],
])
def test_without_the_onnx_extra(models, argv):
    proc = python("-c", NO_ONNX, *argv, cwd=models)
    assert_no_traceback(proc)
    assert proc.returncode == 2
    text = proc.stdout + proc.stderr
    assert 'pip install "extql[onnx]"' in text and "onnx" in text.split("needs")[1]
    assert len(proc.stderr.splitlines()) == 1
    if "--json" in argv:
        assert "extql[onnx]" in json.loads(proc.stdout)["error"]


def test_info_works_without_the_onnx_extra(models):
    proc = python("-c", NO_ONNX, "info", cwd=models)
    assert_no_traceback(proc)
    assert proc.returncode == 0 and "openmp" in proc.stdout and not proc.stderr


# --------------------------------------------------------------------------
# The guard, in-process


def test_an_unexpected_exception_is_one_line_and_status_2(models, capsys, monkeypatch):
    from extql.onnx import check

    def broken(*args, **kwargs):
        raise RuntimeError("something inside broke\nwith a second line")

    monkeypatch.setattr(check, "check_node", broken)
    code = cli.main(["check", str(models / "good.onnx"), "-q"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and "internal error: RuntimeError: something inside broke" in err
    assert "Traceback" not in out + err


def test_ctrl_c_is_status_130(models, capsys, monkeypatch):
    from extql.cli import check

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(check, "check_model", interrupted)
    assert cli.main(["check", str(models / "good.onnx"), "-q"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_warnings_are_one_line(models, capsys, monkeypatch):
    import warnings

    from extql.cli import check

    real = check.check_model

    def warns(*args, **kwargs):
        warnings.warn("a warning\nover two lines", UserWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(check, "check_model", warns)
    assert cli.main(["check", str(models / "good.onnx"), "-q"]) == 0
    err = capsys.readouterr().err
    assert err == "extql: warning: a warning over two lines\n"


def test_usage_errors_with_json_are_json_too(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "--json"])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc == {"command": "check", "ok": False, "exit_code": 2,
                   "error": "extql check: error: the following arguments are required: MODEL"}
    assert "usage: extql check" in err


def test_a_closed_stdout_is_one_line_not_a_traceback(models):
    """``extql info | head -0``: the reader goes away before the output ends."""
    proc = subprocess.Popen([sys.executable, "-m", "extql", "info"], cwd=models,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=TIMEOUT) == 2
    assert err == "extql info: error: stdout was closed before the output ended\n"


@pytest.mark.parametrize("argv", [["bench", "--threads", "-1"], ["bench", "--sizes", "x"],
                                  ["check"], ["run", "--dim", "x"]])
def test_a_bad_argument_is_a_short_message(capsys, argv):
    """A bad argument: status 2, a usage line or two and one error line naming
    the option -- extql bench's too, not its whole option list."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # (argparse's own exit, as `extql` gives it)
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 5, err
    assert err[-1].startswith(f"extql {argv[0]}: error: "), err
