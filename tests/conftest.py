"""pytest set-up shared by every test module.

* tests/ is put on sys.path so that ``contract`` (the independent expectation)
  and the helper modules import.
* A test that runs extql's kernels requests the fixture ``kernel_isa`` (a
  module of such tests with ``pytestmark =
  pytest.mark.usefixtures("kernel_isa")``, a test of its own with the
  decorator, or as an argument); the fixture forces the variant.  The
  exactness tests -- the folders of :data:`SWEPT`: the kernels through the
  NumPy API, the operators by type (their NumPy API cases; the library's
  and the fallbacks' run once, see pytest_collection_modifyitems) -- run
  once per instruction-set variant of the kernels that this build and this
  CPU have (``_kernels.available_isas()``: ``baseline``, ``avx2``, ``avx512``;
  EXTQL_TEST_ISAS picks a subset).  Elsewhere (sessions of whole models,
  tools, processes, packaging) a module runs once, on the variant the CPU
  picks: the variant changes only the kernels' loops, which the exactness
  tests cover.  A test whose expectation costs far more than the kernels
  requests ``each_isa`` instead and loops over the variants itself.  A test
  that runs the kernels without requesting either fixture
  fails, naming it: the kernels' Python entry points and onnxruntime's
  registration of extql's library are watched (:func:`_watch_the_kernels`),
  so that no exactness test runs on one variant by mistake.
* The ``fallback`` marker (declared in pyproject.toml) labels tests that run a
  model through the onnxscript fallback functions with the compiled extql
  library *not* registered.  While such a test runs (its fixtures' set-up
  included), onnxruntime's ``SessionOptions.register_custom_ops_library``
  raises, so a fallback test that registered the library by mistake fails
  instead of silently testing the native kernel.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS)

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
#: The variant of the kernel_isa tests outside SWEPT: the one the CPU picks.
ONE_ISA = _kernels.isa() if _kernels.isa() in ISAS else ISAS[-1]
#: The folders (of tests/) whose kernel_isa tests run on every variant of ISAS.
SWEPT = ("kernels", "operators")


#: The test running now, and the ones that ran the kernels without kernel_isa.
_RUNNING: list[pytest.Item | None] = [None]
_UNSWEPT: set[str] = set()
#: The kernels' entry points that compute (the NumPy API's calls).
_COMPUTING = ("quantize", "quantize_f64", "dequantize", "convert_scales", "unpack",
              "block_quantize_dequantize", "lstm_run")


def _watch_the_kernels() -> None:
    """Note the test that runs the kernels -- calls their entry points
    (directly or through the NumPy API) or registers a custom-op library
    with onnxruntime (extql's, whose ops run them) -- without requesting
    kernel_isa."""

    def note() -> None:
        item = _RUNNING[0]
        if item is not None and not {"kernel_isa", "each_isa"} & set(item.fixturenames):
            _UNSWEPT.add(item.nodeid)

    def watched(function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            note()
            return function(*args, **kwargs)

        return call

    for name in _COMPUTING:
        setattr(_kernels, name, watched(getattr(_kernels, name)))
    try:
        import onnxruntime
    except ImportError:  # (the NumPy API's tests run without it)
        return
    options = onnxruntime.SessionOptions
    register = options.register_custom_ops_library
    import extql

    library = os.path.realpath(extql.get_library_path())

    @functools.wraps(register)
    def register_library(self, path: str) -> None:
        item = _RUNNING[0]
        if item is not None and item.get_closest_marker("fallback") is not None:
            raise RuntimeError(
                f"{item.nodeid} is marked fallback: it runs the fallback functions, so "
                f"registering the custom-op library {path!r} is refused")
        if os.path.exists(path) and os.path.realpath(path) == library:
            note()
        return register(self, path)

    options.register_custom_ops_library = register_library


_watch_the_kernels()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    _RUNNING[0] = item
    yield
    _RUNNING[0] = None


@pytest.fixture(autouse=True)
def _kernels_need_every_variant(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that ran the kernels without kernel_isa: it would run on
    one instruction-set variant only."""
    yield
    if request.node.nodeid in _UNSWEPT:
        pytest.fail(
            f"{request.node.nodeid} runs extql's kernels: request the fixture kernel_isa "
            "(pytest.mark.usefixtures(\"kernel_isa\")) so that it runs on every "
            "instruction-set variant", pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """kernel_isa's variants: every one of ISAS in the folders of SWEPT,
    ONE_ISA elsewhere."""
    if "kernel_isa" in metafunc.fixturenames:
        isas = ISAS if metafunc.definition.path.parent.name in SWEPT else [ONE_ISA]
        metafunc.parametrize("kernel_isa", isas, indirect=True, scope="module")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the swept variants of the cases whose ``path`` (tests/paths.py)
    runs no kernel -- the fallback functions in onnxruntime or onnx.reference
    -- or runs them through onnxruntime: the library's shim calls the same
    entry points, split the same way, on every variant, and the NumPy API's
    cases of the same operators sweep the variants.  They run once, on
    ONE_ISA."""
    try:
        from paths import FALLBACK, FALLBACK_REFERENCE, LIBRARY
    except ImportError:  # (no onnxruntime: no such path)
        return
    no_kernel = {FALLBACK, FALLBACK_REFERENCE, LIBRARY}
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        swept = params.get("kernel_isa", ONE_ISA) != ONE_ISA
        (drop if swept and params.get("path") in no_kernel else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def each_isa(request: pytest.FixtureRequest) -> Callable[[], Iterator[str]]:
    """kernel_isa's variants one after another within one test: ``for isa in
    each_isa(): ...`` forces each in turn (every one of ISAS in the folders
    of SWEPT, ONE_ISA elsewhere) and restores the CPU's choice after the
    loop.  For tests whose expectation costs far more than the kernels
    (whole binades of float32, outputs of 16 MiB): the oracle is computed
    once and every variant is checked against it.  Name the variant in
    the assertion's message."""
    isas = ISAS if request.node.path.parent.name in SWEPT else [ONE_ISA]
    # (a test may also run under a module's kernel_isa: its variant comes back)
    previous = request.getfixturevalue("kernel_isa") if "kernel_isa" in request.fixturenames \
        else None

    def variants() -> Iterator[str]:
        try:
            for isa in isas:
                _kernels.set_isa(isa)
                yield isa
        finally:
            _kernels.set_isa(previous)

    return variants


@pytest.fixture(scope="module")
def kernel_isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Force one kernel variant (baseline, avx2, ...) for the module's tests:
    each of pytest_generate_tests' variants in turn."""
    _kernels.set_isa(request.param)
    yield request.param
    _kernels.set_isa(None)
