"""The Python side of the onnxruntime library: extql.get_library_path,
extql.register, extql.ort.info_rows and `extql info`."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import onnxruntime as ort
import pytest
from childproc import run_python

import extql
from extql import ort as extql_ort

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")


def test_library_path_is_the_library_beside_the_extension():
    """The library onnxruntime registers is libextql_ort, beside the Python
    extension (which links against it); standalone=True names the same
    file, since it needs no Python."""
    path = extql.get_library_path()
    assert os.path.isfile(path)
    from extql import _kernels

    assert os.path.dirname(path) == os.path.dirname(_kernels.__file__)
    assert os.path.basename(path).split(".")[0] in ("libextql_ort", "extql_ort")
    assert extql.get_library_path(standalone=True) == path
    lib = ctypes.CDLL(path)
    assert hasattr(lib, "RegisterCustomOps")
    assert hasattr(lib, "extql_quantize_range")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads ELF with binutils")
def test_library_needs_no_python():
    """No symbol of Python's C API is left undefined in the library, and it
    needs no libpython: a host without Python loads it."""
    path = extql.get_library_path()
    undefined = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True,
                               text=True, check=True).stdout.split()
    assert not [s for s in undefined if s.startswith(("Py", "_Py"))]
    dynamic = subprocess.run(["objdump", "-p", path], capture_output=True, text=True,
                             check=True).stdout
    needed = [line.split()[1] for line in dynamic.splitlines() if line.strip().startswith("NEEDED")]
    assert needed and not [n for n in needed if "python" in n.lower()], needed


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
    out = run_python("-m", "extql.cli", "info").stdout
    assert extql.get_library_path() in out
    assert "ort tested" in out


def test_import_extql_does_not_import_onnxruntime():
    code = "import sys, extql; print('onnxruntime' in sys.modules)"
    out = run_python("-c", code)
    assert out.stdout.strip() == "False"


def _register_with_fake_runtime(version: bytes, newest_api: int):
    """Call RegisterCustomOps with a stand-in OrtApiBase whose runtime claims
    `version` and provides API versions 1..newest_api; only CreateStatus
    (slot 0) exists in its table.  Returns (status pointer, GetApi calls,
    statuses created)."""
    lib = ctypes.CDLL(extql.get_library_path())
    created: list[tuple[int, str]] = []
    calls: list[int] = []

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
    def create_status(code, msg):
        created.append((code, msg.decode()))
        return 0x5A5A0  # a stand-in status pointer, never dereferenced

    table = (ctypes.c_void_p * 512)()
    table[0] = ctypes.cast(create_status, ctypes.c_void_p)
    version_buf = ctypes.create_string_buffer(version)

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
    def get_api(v):
        calls.append(v)
        return ctypes.addressof(table) if 1 <= v <= newest_api else None

    @ctypes.CFUNCTYPE(ctypes.c_void_p)
    def get_version():
        return ctypes.addressof(version_buf)

    base = (ctypes.c_void_p * 2)(
        ctypes.cast(get_api, ctypes.c_void_p), ctypes.cast(get_version, ctypes.c_void_p)
    )
    lib.RegisterCustomOps.restype = ctypes.c_void_p
    lib.RegisterCustomOps.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    status = lib.RegisterCustomOps(None, ctypes.addressof(base))
    return status, calls, created


@pytest.mark.parametrize("version,newest", [(b"1.15.1", 15), (b"1.17.3", 17)])
def test_too_old_runtime_is_refused_clearly(version, newest):
    status, calls, created = _register_with_fake_runtime(version, newest)
    assert status == 0x5A5A0
    # The version string alone decides: no GetApi of an unsupported version
    # (onnxruntime prints a complaint of its own for that).
    assert calls == [1]
    ((code, message),) = created
    assert code == 1  # ORT_FAIL
    assert version.decode() in message
    assert f">= {extql_ort.MIN_ONNXRUNTIME}" in message


def test_unparsable_version_falls_back_to_get_api():
    """A version string that is not '1.N...': GetApi(18) decides, and its
    NULL answer is reported the same way."""
    status, calls, created = _register_with_fake_runtime(b"dev-build", 17)
    assert status == 0x5A5A0
    assert calls == [18, 1]
    assert "too old" in created[0][1]
