"""``extql.get_library_path(standalone=True)``: the Python-free custom-op
library beside the package, under one name per platform -- the same file a
Python process registers.  (What the library itself does, registered in a
host without Python, is checked by tests/ort/test_c_host.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

import extql
from extql import ort as extql_ort

# Once, on the kernel variant the CPU picks (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")


@pytest.mark.parametrize(("platform", "name"), [
    ("linux", "libextql_ort.so"), ("darwin", "libextql_ort.dylib"), ("win32", "extql_ort.dll"),
    ("freebsd14", "libextql_ort.so"),
])
def test_one_name_per_platform(platform, name):
    assert extql_ort.standalone_name(platform) == name


def test_the_path_is_the_file_beside_the_package(tmp_path, monkeypatch):
    """Found beside the package's modules, for hosts and for Python alike;
    missing, a FileNotFoundError that names the file (never the Python
    extension in its place)."""
    monkeypatch.setattr(extql_ort, "_package_dir", lambda: tmp_path)
    library = tmp_path / extql_ort.standalone_name()
    with pytest.raises(FileNotFoundError, match=str(library).replace(".", r"\.")):
        extql.get_library_path(standalone=True)
    library.write_bytes(b"\x7fELF")
    assert extql.get_library_path(standalone=True) == str(library)
    assert extql.get_library_path() == str(library)


def test_this_build_has_it():
    """Every build has it, in the installed ``extql`` package's directory."""
    assert extql_ort._package_dir() == Path(extql.__file__).resolve().parent
    path = extql.get_library_path(standalone=True)
    assert Path(path).is_file() and Path(path).parent == Path(extql.__file__).parent
