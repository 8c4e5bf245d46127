"""The Python side of the onnxruntime library: extql.get_library_path,
extql.register, extql.ort.info_rows and `extql info`."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import onnxruntime as ort
import pytest

import extql
from extql import ort as extql_ort


def test_library_path_is_the_kernels_extension():
    path = extql.get_library_path()
    assert os.path.isfile(path)
    from extql import _kernels

    assert os.path.samefile(path, _kernels.__file__)
    # The one shared object exports the entry point and the kernels.
    lib = ctypes.CDLL(path)
    assert hasattr(lib, "RegisterCustomOps")
    assert hasattr(lib, "extql_quantize_range")


def test_register_returns_the_same_options():
    so = ort.SessionOptions()
    assert extql.register(so) is so


def test_register_by_path_works_too():
    so = ort.SessionOptions()
    so.register_custom_ops_library(extql.get_library_path())


def test_register_rejects_other_objects():
    with pytest.raises(TypeError, match="extql.register: expected an onnxruntime.SessionOptions"):
        extql.register(object())


def test_info_rows():
    rows = dict(extql_ort.info_rows())
    assert rows["ort library"] == extql.get_library_path()
    assert rows["onnxruntime"].startswith(ort.__version__)
    assert rows["ort supported"] == f">= {extql_ort.MIN_ONNXRUNTIME}"
    assert extql_ort.TESTED_ONNXRUNTIME[0].startswith(extql_ort.MIN_ONNXRUNTIME)


def test_installed_runtime_is_supported():
    have = tuple(int(p) for p in ort.__version__.split(".")[:2])
    need = tuple(int(p) for p in extql_ort.MIN_ONNXRUNTIME.split("."))
    assert have >= need


def test_cli_info_prints_the_library():
    out = subprocess.run(
        [sys.executable, "-m", "extql.cli", "info"], capture_output=True, text=True, check=True
    ).stdout
    assert extql.get_library_path() in out
    assert "ort tested" in out


def test_import_extql_does_not_import_onnxruntime():
    code = "import sys, extql; print('onnxruntime' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
