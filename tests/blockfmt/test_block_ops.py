"""BFPQuantizeDequantize / MXQuantizeDequantize (and the legacy names
BFPFixNeuron / MXFixNeuron) by behaviour, on every path: the NumPy API, one
node in onnxruntime with extql's library and one node in onnx.reference with
extql.reference.OPS (tests/blockfmt_paths.py).

* AMD Quark 0.13's own library's bits on its single-node grid
  (tests/data/blockfmt: every attribute, rank, axis, special value, float16
  and both domains' names); the library at every graph optimisation level
  with one and two threads, each run also giving the NumPy API's bits;
* any node the contract defines (the oracle's hypothesis strategy) and the
  defaults, against the oracle (tests/blockfmt_contract.py);
* large tensors, split between threads (the NumPy API's threads, the
  session's intra-op pool): two threads give one thread's bits and the
  oracle's;
* the refusals (tests/blockfmt_refusals.py): every case the contract leaves
  undefined or extql bounds, attributes of the wrong kind, x of another
  type -- a ValueError / TypeError of the NumPy API and of the reference op
  (naming the node), a failed status of the library (when the session is
  made, or run where the graph does not give x's rank), with the same words
  naming the attribute and the value.

Bit for bit, any NaN equal to any NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from blockfmt_contract import expected, refusals
from blockfmt_data import GRID_CASES, assert_quarks_bits, grid_arrays
from blockfmt_paths import (
    LIBRARY,
    NUMPY,
    PATHS,
    RUNS,
    block_via,
    many_node_model,
    refusal_words,
    run_library,
)
from blockfmt_refusals import (
    OTHER_X_TYPES,
    REFUSED,
    WRONG_KIND,
    refused_attribute,
    refused_id,
    refused_shape,
)
from blockfmt_values import as_dtype, mixed_values, node_cases
from contract import assert_same_bits, case_rng
from hypothesis import given, settings

import extql

# Runs extql's kernels: once per instruction-set variant (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

BFP = "BFPQuantizeDequantize"
MX = "MXQuantizeDequantize"


def _id(value) -> str:
    return "-".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else str(value)


# ---------------------------------------------------------------- Quark's grid

@pytest.fixture(scope="module")
def grid_runs(kernel_isa) -> list[dict[str, np.ndarray]]:
    """Every grid case as a node of one model, run by the library at every
    (level, threads) of RUNS: the outputs of each run by case id."""
    model, feeds = many_node_model(
        [(c["op_type"], c["attrs"], grid_arrays(c)[0]) for c in GRID_CASES])
    runs = []
    for level, threads in RUNS:
        out = run_library(model, feeds, level=level, threads=threads)
        runs.append({c["id"]: out[f"y{i}"] for i, c in enumerate(GRID_CASES)})
    return runs


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", GRID_CASES, ids=[c["id"] for c in GRID_CASES])
def test_quarks_bits_on_its_grid(request, path, case):
    x, _ = grid_arrays(case)
    before = x.copy()
    numpy_y = block_via(NUMPY, case["op_type"], x, case["attrs"])
    if path == LIBRARY:
        outputs = [run[case["id"]] for run in request.getfixturevalue("grid_runs")]
    else:
        outputs = [numpy_y if path == NUMPY else block_via(path, case["op_type"], x,
                                                           case["attrs"])]
    for (level, threads), y in zip(RUNS if path == LIBRARY else [(None, 0)], outputs,
                                   strict=True):
        what = f"{path} level {level} x{threads}"
        assert_quarks_bits(y, case, f"{case['id']} {what}")
        assert_same_bits(y, numpy_y, f"{case['id']} {what} vs the NumPy API")
    assert_same_bits(x, before, "x was modified")


# ---------------------------------------------------------------- the oracle

@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=200, deadline=None)
@given(case=node_cases())
def test_any_node_the_contract_defines(path, case):
    """Any op name (both domains), attributes, rank, axis and type (float32,
    float16) the contract defines, on inputs that reach every lane (the
    oracle's own strategy)."""
    op_type, attrs, x = case
    assert_same_bits(block_via(path, op_type, x, attrs), expected(op_type, x, attrs),
                     f"{path} {op_type} {attrs}")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", [BFP, MX, "BFPFixNeuron", "MXFixNeuron"])
def test_defaults_are_quarks(path, op):
    """Without attributes, the op defaults (a block of 8 / 32 along axis 1)."""
    x = mixed_values(case_rng(op, "defaults"), (3, 40, 5))
    assert_same_bits(block_via(path, op, x, {}), expected(op, x, {}), f"{path} {op}")


# ---------------------------------------------------------------- threads

#: Tensors above the size the library hands to the session's pool
#: (extql/src/extql_split.h): contiguous blocks, blocks down the columns
#: (wide and narrow), the compiler-version kernel, to_bfp_prime and MX.
THREAD_CASES = [
    (BFP, {"axis": -1}, (256, 1024)),
    (BFP, {"axis": 1, "use_compiler_version_cpu_kernel": 1}, (2, 64, 2048)),
    (BFP, {"bfp_method": "to_bfp_prime", "block_size": 16, "axis": 1}, (4, 96, 700)),
    (MX, {"element_dtype": "fp4_e2m1", "axis": -1}, (512, 520)),
    (MX, {"axis": 0, "rounding_mode": 2}, (4096, 80)),
    (MX, {"element_dtype": "fp6_e2m3", "axis": 1}, (256, 256, 3, 3)),
]


def _threads(path: str, op: str, x: np.ndarray, attrs: dict, threads: int) -> np.ndarray:
    """The op on x with ``threads`` threads: extql's own (the NumPy API) or
    the session's intra-op pool (the library)."""
    if path == LIBRARY:
        return block_via(path, op, x, attrs, threads=threads)
    saved = extql.get_num_threads()
    try:
        extql.set_num_threads(threads)
        return block_via(path, op, x, attrs)
    finally:
        extql.set_num_threads(saved)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("op,attrs,shape", THREAD_CASES,
                         ids=[f"{o[:3]}-{_id(a)}-{s}" for o, a, s in THREAD_CASES])
def test_two_threads_give_one_threads_bits(path, op, attrs, shape, dtype):
    x = as_dtype(mixed_values(case_rng(op, "threads", _id(attrs)), shape), np.dtype(dtype))
    one = _threads(path, op, x, attrs, 1)
    two = _threads(path, op, x, attrs, 2)
    assert_same_bits(two, one, f"{path}: 2 threads")
    assert_same_bits(one, expected(op, x, attrs), f"{path}: 1 thread")


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op,attrs,rank", REFUSED, ids=[refused_id(c) for c in REFUSED])
def test_refused_naming_operator_attribute_value(path, op, attrs, rank):
    x = np.ones(refused_shape(rank), np.float32)
    name, value = refused_attribute(attrs)
    if rank == 1 and name == "axis":
        # Rank 1 ignores the axis: this one runs.
        assert_same_bits(block_via(path, op, x, attrs), expected(op, x, attrs), "rank 1")
        return
    words = refusal_words(path, op, x, attrs)
    assert words.startswith(f"{name} ") and str(value) in words, words
    assert words == refusal_words(NUMPY, op, x, attrs)


def test_refusals_cover_the_oracles():
    """Every node the oracle refuses is refused here too (and the oracle
    agrees with each contract refusal of REFUSED)."""
    for op, attrs, rank in REFUSED:
        name, _ = refused_attribute(attrs)
        if name in {"bit_width", "sub_block_shift_bits"} or (rank == 1 and name == "axis"):
            assert not refusals(op, attrs, rank=rank), (op, attrs)
        else:
            assert refusals(op, attrs, rank=rank), (op, attrs)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", [BFP, MX])
@pytest.mark.parametrize("attr,value,words", WRONG_KIND,
                         ids=[f"{a}={v!r}" for a, v, _ in WRONG_KIND])
def test_attribute_of_wrong_kind_is_refused(path, op, attr, value, words):
    """A string or float32 where an integer belongs (a float32: onnx keeps
    a node's float attributes in float32)."""
    if isinstance(value, float):
        value = float(np.float32(value))
    assert refusal_words(path, op, np.ones((2, 8), np.float32), {attr: value}) == words


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op,attr", [(BFP, "bfp_method"), (MX, "element_dtype")])
@pytest.mark.parametrize("value,shown", [(3, "3"), (2.5, "2.5")])
def test_method_of_wrong_kind_is_refused(path, op, attr, value, shown):
    words = refusal_words(path, op, np.ones((2, 8), np.float32), {attr: value})
    assert words == f"attribute {attr} must be a string, got {shown}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", [BFP, MX, "MXFixNeuron"])
@pytest.mark.parametrize("dtype", OTHER_X_TYPES)
def test_other_types_of_x_refused(path, op, dtype):
    words = refusal_words(path, op, np.ones((2, 8), dtype), {})
    assert words == f"x must be one of float32, float16, got {dtype}"
