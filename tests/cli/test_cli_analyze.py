"""``extql analyze FLOAT QUANT`` as users run it: real processes, exit
statuses, one-line errors, the JSON document, the HTML page and the PNG."""

from __future__ import annotations

import html.parser
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import quarkmodels as qm
from analyzecheck import assert_db, model_sqnr

# Once, on the kernel variant the CPU picks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

TIMEOUT = 300
# A Python that behaves as if matplotlib were not installed.
NO_MATPLOTLIB = (
    "import sys\n"
    "sys.modules['matplotlib'] = None\n"
    "from extql.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def extql_cli(*args, cwd: Path, python: tuple[str, ...] = ("-m", "extql")):
    proc = subprocess.run([sys.executable, *python, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(os.environ))
    assert proc.returncode >= 0, f"signal {-proc.returncode}"
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """float.onnx, quant.onnx (r's scale 100 times too small), good.onnx
    (the same without the broken scale), in.npz (a batch of 3)."""
    d = tmp_path_factory.mktemp("analyze")
    float_model = qm.float_cnn()
    onnx.save(float_model, str(d / "float.onnx"))
    onnx.save(qm.quark_quantize(float_model, "int8", scale_factor={"r": 0.01}),
              str(d / "quant.onnx"))
    onnx.save(qm.quark_quantize(float_model, "int8"), str(d / "good.onnx"))
    onnx.save(qm.float_transformer(), str(d / "other.onnx"))
    feeds = qm.calibration(float_model, 3, seed=21)
    np.savez(d / "in.npz", x=np.stack([f["x"] for f in feeds]))
    np.savez(d / "wrong.npz", x=np.zeros((2, 3, 8), np.float32))
    (d / "notonnx.onnx").write_bytes(b"\x00 this is not a model")
    return d


def _strict_json(text: str) -> dict:
    def refuse(name):
        raise AssertionError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_document_ranks_the_broken_point_first(work):
    proc = extql_cli("analyze", "float.onnx", "quant.onnx", "--inputs", "in.npz",
                     "--what-if", "2", "--json", cwd=work)
    assert proc.returncode == 0, proc.stderr
    doc = _strict_json(proc.stdout)
    assert doc["command"] == "analyze" and doc["ok"] and doc["exit_code"] == 0
    assert doc["samples"] == 3 and doc["random_inputs"] is False
    assert doc["points"][0]["tensor"] == "r" and doc["points"][0]["clipped_fraction"] > 0.3
    with np.load(work / "in.npz") as data:
        feeds = [{"x": v} for v in data["x"]]
    float_model = onnx.load(str(work / "float.onnx"))
    quant = onnx.load(str(work / "quant.onnx"))
    assert_db(doc["model_sqnr_db"], model_sqnr(float_model, quant, feeds), "model")
    (bypass,) = [w for w in doc["what_if"] if w["tensor"] == "r" and w["variant"] == "bypass"]
    good = model_sqnr(float_model, onnx.load(str(work / "good.onnx")), feeds)
    assert bypass["gain_db"] > 0.9 * (good - doc["model_sqnr_db"])


def test_text_table_progress_and_random_inputs(work):
    proc = extql_cli("analyze", "float.onnx", "quant.onnx", "--samples", "2", cwd=work)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    first = next(r for r in rows if r and r[0] == "1")
    assert first[1] == "r" and first[2] == "activation" and first[3] == "int8"
    assert "over 2 sample(s) of random inputs" in proc.stdout
    assert "warning: random standard-normal data" in proc.stderr
    assert "running FLOAT and QUANT: 2/2" in proc.stderr
    quiet = extql_cli("analyze", "float.onnx", "quant.onnx", "--inputs", "in.npz", "-q",
                      cwd=work)
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.parametrize("args,message", [
    (["float.onnx", "quant.onnx", "--inputs", "wrong.npz"], "input 'x' has shape [2, 3, 8]"),
    (["other.onnx", "quant.onnx"], "do not fit together"),
    (["quant.onnx", "float.onnx"], "has no quantization point"),
    (["float.onnx", "float.onnx"], "has no quantization point"),
    (["float.onnx", "nope.onnx"], "nope.onnx: no such file"),
    (["notonnx.onnx", "quant.onnx"], "notonnx.onnx: not a readable ONNX model"),
    (["float.onnx", "quant.onnx", "--report", "r.txt"], "r.txt: --report writes"),
    (["float.onnx", "quant.onnx", "--report", "no/such/dir/r.html"], "does not exist"),
])
def test_what_cannot_be_analysed_exits_2_with_one_line(work, args, message):
    proc = extql_cli("analyze", *args, "-q", cwd=work)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "warning" not in line]
    assert len(errors) == 1 and errors[0].startswith("extql analyze: error: "), proc.stderr
    assert message in errors[0]
    as_json = extql_cli("analyze", *args, "-q", "--json", cwd=work)
    doc = _strict_json(as_json.stdout)
    assert as_json.returncode == 2 and doc["exit_code"] == 2 and message in doc["error"]


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.classes: dict[str, int] = {}
        self.open: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for k, v in attrs:
            if k == "class":
                self.classes[v] = self.classes.get(v, 0) + 1

    def handle_data(self, data):
        self.text.append(data)


def test_report_html_page(work):
    proc = extql_cli("analyze", "float.onnx", "quant.onnx", "--inputs", "in.npz",
                     "--what-if", "2", "--report", "report.html", "--json", "-q", cwd=work)
    assert proc.returncode == 0, proc.stderr
    doc = _strict_json(proc.stdout)
    assert doc["report"] == "report.html"
    page = _Page()
    page.feed((work / "report.html").read_text(encoding="utf-8"))
    page.close()
    assert page.tags["svg"] == 2 and page.tags["html"] == 1
    assert "script" not in page.tags and "img" not in page.tags  # self-contained
    local = [p for p in doc["points"] if p["local_sqnr_db"] is not None]
    accumulated = [p for p in doc["points"] if p["accumulated_sqnr_db"] is not None]
    exact = len(doc["points"]) - len(local) + len(doc["points"]) - len(accumulated)
    assert page.classes["local_sqnr_db"] + page.classes["accumulated_sqnr_db"] == \
        len(local) + len(accumulated) + exact
    assert page.classes["gain"] == len(doc["what_if"])
    text = " ".join(page.text)
    assert all(p["tensor"] in text for p in doc["points"])


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_png_picture(work):
    proc = extql_cli("analyze", "float.onnx", "quant.onnx", "--inputs", "in.npz",
                     "--what-if", "1", "--report", "report.png", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "wrote report.png" in proc.stdout
    data = (work / "report.png").read_bytes()
    width, height = _png_size(data)
    assert width >= 600 and height >= 300
    import matplotlib.image

    image = matplotlib.image.imread(str(work / "report.png"))
    assert image.shape[:2] == (height, width)
    assert np.ptp(image[..., :3]) > 0.5  # not a blank picture


def test_png_without_matplotlib_says_what_to_install_before_the_work(work):
    proc = extql_cli("analyze", "float.onnx", "quant.onnx", "--report", "nompl.png",
                     cwd=work, python=("-c", NO_MATPLOTLIB))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "matplotlib" in line and 'pip install "extql[plot]"' in line
    assert not (work / "nompl.png").exists()
