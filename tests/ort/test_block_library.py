"""What only extql's onnxruntime library does with the block formats
(BFPQuantizeDequantize / MXQuantizeDequantize and the legacy BFPFixNeuron /
MXFixNeuron); their numbers and refusals on every path are in
tests/blockfmt/test_block_ops.py.

* graph inference: y gets x's type (every release) and, from
  extql.ort.INFERENCE_ONNXRUNTIME, x's shape, so the nodes after it are
  inferred (a Shape of y is x's shape, folded or not), whatever x's
  declaration;
* a chain of nodes, where onnxruntime may run a node in place (y in x's
  buffer: an activation with no other use), large enough to be split over
  the session's threads, at every level with one and two threads;
* tensors at odd addresses, empty tensors;
* each name in its own domain only;
* the C header the library checks its attributes with is the one
  tools/gen_block_rules_header.py writes from extql/rules/blocks.py.

Values against the oracle (tests/blockfmt_contract.py), bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from blockfmt_contract import expected
from blockfmt_paths import LEVEL_IDS, node, node_model, run_library
from blockfmt_values import as_dtype, mixed_values
from contract import assert_same_bits, case_rng
from onnx import TensorProto, helper
from ortutil import INFERS, ONNX_OF, ORT_TYPE, make_model, run_unaligned, session, value_info

import extql

# Runs extql's kernels: once per instruction-set variant (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
ROOT = Path(__file__).resolve().parents[2]
BFP = ("BFPQuantizeDequantize", {"axis": -1, "rounding_mode": 2})
MX = ("MXQuantizeDequantize", {"element_dtype": "fp8_e4m3", "axis": 1, "block_size": 16})
SHAPE = (2, 40, 5)
#: How x is declared: its dims as the graph input says them (None: no shape).
DECLARED = {"exact": list(SHAPE), "named": ["batch", 40, "width"], "unnamed": [None, 40, None],
            "unknown": None}


@pytest.mark.parametrize("level", list(LEVEL_IDS.values()), ids=list(LEVEL_IDS))
@pytest.mark.parametrize("declared", list(DECLARED))
@pytest.mark.parametrize("dtype", [F32, F16], ids=["f32", "f16"])
def test_y_has_the_type_and_shape_of_x(dtype, declared, level):
    """x -> BFP -> y -> MX -> z, y and z undeclared: their type is x's
    (from the registrations), their shape x's where onnxruntime infers it
    (Shape of each, folded where it is known), their values the oracle's."""
    x = as_dtype(mixed_values(case_rng("inference", declared), SHAPE), dtype)
    nodes = [node(BFP[0], BFP[1], "x", "y", name="bfp"), node(MX[0], MX[1], "y", "z", name="mx"),
             helper.make_node("Shape", ["y"], ["y_shape"]),
             helper.make_node("Shape", ["z"], ["z_shape"])]
    outputs = [value_info("y", None), value_info("z", None),
               value_info("y_shape", TensorProto.INT64, [3]),
               value_info("z_shape", TensorProto.INT64, [3])]
    model = make_model(nodes, [value_info("x", ONNX_OF[dtype], DECLARED[declared])], outputs)
    sess = session(model, level=level)
    infos = {o.name: o for o in sess.get_outputs()}
    for name in ("y", "z"):
        assert infos[name].type == ORT_TYPE[ONNX_OF[dtype]], (name, infos[name].type)
        if INFERS and declared in ("exact", "named"):
            assert infos[name].shape == DECLARED[declared], (name, infos[name].shape)
    y, z, y_shape, z_shape = sess.run(["y", "z", "y_shape", "z_shape"], {"x": x})
    assert list(y_shape) == list(SHAPE) and list(z_shape) == list(SHAPE)
    want_y = expected(BFP[0], x, BFP[1])
    assert_same_bits(y, want_y, "y")
    assert_same_bits(z, expected(MX[0], want_y, MX[1]), "z")


#: Above the size the library hands to the session's pool.
LARGE = (4, 64, 1030)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("level", list(LEVEL_IDS.values()), ids=list(LEVEL_IDS))
def test_a_chain_in_place_on_the_sessions_threads(level, threads):
    """x -> Neg -> BFP -> MXFixNeuron -> BFPFixNeuron -> z: each block node's
    input is an activation with no other use, so onnxruntime may give its y
    the input's buffer (from INFERENCE_ONNXRUNTIME, where y's shape is
    known); the bits are the oracle's either way."""
    x = mixed_values(case_rng("chain"), LARGE)
    chain = [("BFPQuantizeDequantize", {"bfp_method": "to_bfp_prime", "block_size": 16}),
             ("MXFixNeuron", {"element_dtype": "int8", "axis": -1, "rounding_mode": 1}),
             ("BFPFixNeuron", {"axis": 0, "block_size": 3})]
    names = ["r", "a", "b", "z"]
    nodes = [helper.make_node("Neg", ["x"], ["r"])]
    nodes += [node(op, attrs, names[i], names[i + 1], name=f"n{i}")
              for i, (op, attrs) in enumerate(chain)]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, LARGE)],
                       [value_info("z", TensorProto.FLOAT, LARGE)],
                       domains=("com.amd.quark", "com.vai.quantize"))
    got = run_library(model, {"x": x}, level=level, threads=threads)["z"]
    want = -x
    for op, attrs in chain:
        want = expected(op, want, attrs)
    assert_same_bits(got, want, "chain")


@pytest.mark.parametrize("dtype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("op,attrs", [BFP, MX], ids=["bfp", "mx"])
def test_tensors_at_odd_addresses(op, attrs, dtype):
    """x and y bound at odd addresses (misaligned for their elements)."""
    x = as_dtype(mixed_values(case_rng("odd", op), SHAPE), dtype)
    sess = session(node_model(op, x, attrs))
    assert_same_bits(run_unaligned(sess, {"x": x}, dtype, SHAPE), expected(op, x, attrs),
                     "unaligned")


@pytest.mark.parametrize("shape", [(0,), (3, 0, 8), (2, 16, 0)])
@pytest.mark.parametrize("op,attrs", [BFP, MX], ids=["bfp", "mx"])
def test_empty_tensors(op, attrs, shape):
    x = np.zeros(shape, np.float32)
    y = run_library(node_model(op, x, attrs), {"x": x})["y"]
    assert y.shape == shape and y.dtype == F32


@pytest.mark.parametrize("op,domain", [("BFPFixNeuron", "com.amd.quark"),
                                       ("MXFixNeuron", "com.amd.quark"),
                                       ("BFPQuantizeDequantize", "com.vai.quantize"),
                                       ("MXQuantizeDequantize", "com.vai.quantize")])
def test_each_name_in_its_own_domain(op, domain):
    """The legacy names are com.vai.quantize's, the others com.amd.quark's,
    as Quark's own library registers them."""
    x = np.ones((2, 8), np.float32)
    n = helper.make_node(op, ["x"], ["y"], domain=domain)
    model = make_model([n], [value_info("x", TensorProto.FLOAT, x.shape)],
                       [value_info("y", TensorProto.FLOAT, x.shape)], domains=(domain,))
    with pytest.raises(Exception, match=op):
        session(model)


def test_the_library_registers_every_block_format_name():
    """One session of all four names runs (the domains and names
    extql.ort documents)."""
    x = np.ones((2, 8), np.float32)
    ops = ["BFPQuantizeDequantize", "MXQuantizeDequantize", "BFPFixNeuron", "MXFixNeuron"]
    names = ["x"] + [f"y{i}" for i in range(len(ops))]
    nodes = [node(op, {}, names[i], names[i + 1], name=op) for i, op in enumerate(ops)]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, x.shape)],
                       [value_info(names[-1], TensorProto.FLOAT, x.shape)],
                       domains=("com.amd.quark", "com.vai.quantize"))
    want = x
    for op in ops:
        want = expected(op, want, {})
        assert op in extql.ort.__doc__
    assert_same_bits(run_library(model, {"x": x})[names[-1]], want, "four names")


# ---------------------------------------------------------------- the rules' header

def _generator():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_block_rules_header
    finally:
        sys.path.pop(0)
    return gen_block_rules_header


def test_the_built_header_is_generated_from_the_rules():
    gen = _generator()
    header = Path(extql.__file__).parent / "src" / "extql_block_rules.h"
    assert header.read_text() == gen.header_text(gen.load_rules())


def test_the_generator_writes_the_rules_words(tmp_path):
    """Each message of block_rules is a C format of the same words, and a
    stale header is rewritten."""
    gen = _generator()
    rules = gen.load_rules()
    text = gen.header_text(rules)
    assert 'snprintf(buf, size, "rounding_mode %lld is not one of 0 (half away from zero), ' \
        '1 (half toward +inf), 2 (half to even)", value)' in text
    assert '"bfp_method %s is not one of \'to_bfp\', \'to_bfp_prime\', ' \
        '\'to_bfp_prime_shared\'", quoted_value)' in text
    for key in rules.MESSAGES:
        assert f"extql_block_msg_{key}(" in text, key
    for name, kind, default in rules.BFP_ATTRIBUTES + rules.MX_ATTRIBUTES:
        row = (f'{{"{name}", \'s\', 0, "{default}"}}' if kind == "s"
               else f'{{"{name}", \'i\', {default}, NULL}}')
        assert row in text, row
    header = tmp_path / "extql_block_rules.h"
    header.write_text(text.replace("is outside", "is out of"))
    assert gen.write_header(header) is True and header.read_text() == text
    assert gen.write_header(header) is False

