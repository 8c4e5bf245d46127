"""The guard of the ``fallback`` marker: while a test marked ``fallback`` runs,
no custom-op library can be registered, so such a test really runs the
fallback functions (see tests/conftest.py); other tests register as usual."""

from __future__ import annotations

import onnxruntime as ort
import pytest


@pytest.mark.fallback
def test_registering_a_library_is_refused_in_a_fallback_test(tmp_path):
    options = ort.SessionOptions()
    with pytest.raises(RuntimeError, match="is marked fallback"):
        options.register_custom_ops_library(str(tmp_path / "libnot-there.so"))


def test_registering_a_library_is_left_to_onnxruntime_elsewhere(tmp_path):
    options = ort.SessionOptions()
    # The guard is off: onnxruntime itself tries to load the file and fails.
    with pytest.raises(Exception) as info:  # noqa: B017 (onnxruntime's own Fail type)
        options.register_custom_ops_library(str(tmp_path / "libnot-there.so"))
    assert "marked fallback" not in str(info.value)
    assert "libnot-there.so" in str(info.value)
