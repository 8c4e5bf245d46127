"""The harness of ``tox -e fallback``: with EXTQL_FALLBACK_ONLY=1 no custom-op
library can be registered, so a test marked ``fallback`` really runs the
fallback functions (see tests/conftest.py)."""

from __future__ import annotations

import os

import onnxruntime as ort
import pytest


@pytest.mark.fallback
def test_registering_a_library_is_refused_only_in_the_fallback_env(tmp_path):
    missing = str(tmp_path / "libnot-there.so")
    options = ort.SessionOptions()
    if os.environ.get("EXTQL_FALLBACK_ONLY") == "1":
        with pytest.raises(RuntimeError, match="EXTQL_FALLBACK_ONLY=1"):
            options.register_custom_ops_library(missing)
    else:
        # The guard is off: onnxruntime itself tries to load the file and fails.
        with pytest.raises(Exception) as info:  # noqa: B017 (onnxruntime's own Fail type)
            options.register_custom_ops_library(missing)
        assert "EXTQL_FALLBACK_ONLY" not in str(info.value)
        assert "libnot-there.so" in str(info.value)
