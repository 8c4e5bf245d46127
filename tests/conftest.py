"""Shared pytest setup: make tests/contract.py importable, and run every test
on every instruction-set variant of the kernels this build and CPU have."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from extql import _kernels  # noqa: E402

ISAS = _kernels.available_isas()


@pytest.fixture(scope="module", params=ISAS, autouse=True)
def kernel_isa(request):
    """Force one kernel variant (baseline, avx2, ...) for the module's tests."""
    _kernels.set_isa(request.param)
    yield request.param
    _kernels.set_isa(None)
