"""pytest set-up shared by every test module.

* tests/ is put on sys.path so that ``contract`` (the independent expectation)
  and the helper modules import.
* A test module that runs extql's kernels requests the fixture
  ``kernel_isa`` (``pytestmark = pytest.mark.usefixtures("kernel_isa")``, or
  as an argument) and runs once per instruction-set variant of the kernels
  that this build and this CPU have (``_kernels.available_isas()``:
  ``baseline``, ``avx2``, ...; EXTQL_TEST_ISAS picks a subset); the fixture
  forces the variant.  Modules that do not run the kernels in this process
  (the command's conventions and layout in child processes, packaging, the
  repository's layout) run once, on the variant the CPU picks.
* The ``fallback`` marker (declared in pyproject.toml) labels tests that run a
  model through the onnxscript fallback functions with the compiled extql
  library *not* registered.  ``tox -e fallback`` runs ``pytest -m fallback``
  with ``EXTQL_FALLBACK_ONLY=1``; then onnxruntime's
  ``SessionOptions.register_custom_ops_library`` is replaced for the whole
  session by a function that raises, so a fallback test that registered the
  library by mistake fails instead of silently testing the native kernel.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from extql import _kernels  # noqa: E402


def _isas() -> list[str]:
    """The kernel variants every kernel test runs on: all this build and CPU have,
    or those EXTQL_TEST_ISAS names (comma-separated; ``default`` is the one
    the CPU picks).  tox's envs that vary Python, onnx, onnxruntime or NumPy
    set ``default``: the variant does not interact with those, and the
    README's test command runs every variant."""
    available = _kernels.available_isas()
    wanted = os.environ.get("EXTQL_TEST_ISAS", "").strip()
    if not wanted:
        return available
    names = [_kernels.isa() if w.strip() == "default" else w.strip() for w in wanted.split(",")]
    unknown = [n for n in names if n not in available]
    if unknown:
        raise pytest.UsageError(f"EXTQL_TEST_ISAS: {unknown} not among {available}")
    return list(dict.fromkeys(names))


ISAS = _isas()
FALLBACK_ONLY = os.environ.get("EXTQL_FALLBACK_ONLY", "") == "1"


@pytest.fixture(scope="module", params=ISAS)
def kernel_isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Force one kernel variant (baseline, avx2, ...) for the module's tests:
    a module that requests it runs once per variant."""
    _kernels.set_isa(request.param)
    yield request.param
    _kernels.set_isa(None)


def _refuse_library(self: object, path: str) -> None:
    raise RuntimeError(
        f"EXTQL_FALLBACK_ONLY=1: this run tests the fallback path, so registering the "
        f"custom-op library {path!r} is refused"
    )


@pytest.fixture(autouse=True, scope="session")
def _fallback_only_session() -> Iterator[None]:
    """In the fallback env, make registering any custom-op library an error."""
    if not FALLBACK_ONLY:
        yield
        return
    import onnxruntime

    cls = onnxruntime.SessionOptions
    original = cls.register_custom_ops_library
    cls.register_custom_ops_library = _refuse_library
    try:
        yield
    finally:
        cls.register_custom_ops_library = original
