"""extql's library in onnxruntime's graph inference: the output's type when
``output_dtype`` asks for one the inputs do not give, and the output's shape.

From extql.ort.INFERENCE_ONNXRUNTIME on, every node's y gets the type the
operator defines and x's shape where x's rank is known when the session is
made; the nodes after it are inferred (and folded) with it.  A wrong shape
would be a silent wrong answer (a Shape of y folded to the wrong value), so
every form of x's declaration is run: exact dims, named dims, dims with
neither, no shape at all, a scalar.  Elsewhere (older onnxruntime, or an x of
unknown rank) an ``output_dtype`` other than the type the inputs give fails
with a message that names the operator and says why.  Every optimisation
level; values against the contract, bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from contract import BF16, assert_same_bits, dequantize, quantize
from onnx import TensorProto, helper
from ortutil import (
    DQ,
    INFERS,
    LEGACY,
    LEGACY_DOMAIN,
    LEVELS,
    ONNX_OF,
    ORT_TYPE,
    Q,
    make_model,
    run,
    session,
    tensor,
    value_info,
)

# Runs extql's kernels in this process: once per instruction-set variant (conftest.py).
pytestmark = pytest.mark.usefixtures("kernel_isa")

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
SHAPE = (2, 3, 5)
#: How x is declared: its dims as the graph input says them (None: no shape).
DECLARED = {"exact": list(SHAPE), "named": ["batch", 3, "width"], "unnamed": [None, 3, None],
            "unknown": None}


def _x(rng, op: str, x_dtype) -> np.ndarray:
    if op == Q:
        x = (rng.standard_normal(SHAPE) * 200).astype(np.float32)
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, -0.0, 2.5, 1e30]
        with np.errstate(over="ignore"):
            return x.astype(x_dtype)
    info = np.iinfo(x_dtype)
    return rng.integers(info.min, info.max, SHAPE, endpoint=True).astype(x_dtype)


def _model(op: str, x: np.ndarray, s: np.ndarray, z: np.ndarray | None, declared,
           zp_form: str = "given", out_type: int | None = None, **attrs) -> onnx.ModelProto:
    """x -> node -> y, and y -> Shape -> y_shape: y undeclared (the type and
    shape onnxruntime reports are the ones it inferred) unless out_type."""
    inputs = ["x", "s"] + {"given": ["z"], "empty": [""], "absent": []}[zp_form]
    inits = [tensor("s", s)] + ([tensor("z", z)] if zp_form == "given" else [])
    nodes = [helper.make_node(op, inputs, ["y"], domain="com.amd.quark", name="node0", **attrs),
             helper.make_node("Shape", ["y"], ["y_shape"])]
    outputs = [value_info("y", out_type), value_info("y_shape", TensorProto.INT64, [x.ndim])]
    return make_model(nodes, [value_info("x", ONNX_OF[x.dtype], declared)], outputs, inits)


# (op, x dtype, scale dtype, zero point dtype or None, output_dtype)
FORMS = [
    (DQ, np.int8, F32, np.int8, F16),
    (DQ, np.uint16, F16, np.uint16, F32),
    (DQ, np.int16, F32, None, BF16),
    (DQ, np.uint8, BF16, np.uint8, F16),
    (Q, F32, F32, None, np.dtype(np.int8)),
    (Q, F16, F16, None, np.dtype(np.int16)),
]


#: Each form with each way of giving its zero point (a form without one: an
#: empty name or two inputs).
ZP_FORMS = [(*f, zp_form) for f in FORMS for zp_form in ("given", "empty", "absent")
            if f[3] is not None or zp_form != "given"]


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize("declared", ["exact", "named", "unnamed"])
@pytest.mark.parametrize(("op", "x_dtype", "s_dtype", "z_dtype", "out", "zp_form"), ZP_FORMS,
                         ids=[f"{o[8:10]}-{np.dtype(x).name}-{np.dtype(s).name}-"
                              f"{np.dtype(z).name if z else 'nozp'}-to-{np.dtype(t).name}-{f}"
                              for o, x, s, z, t, f in ZP_FORMS])
def test_output_dtype_types_the_output(op, x_dtype, s_dtype, z_dtype, out, zp_form, declared,
                                       level):
    """The output has output_dtype's type, x's shape (Shape of it folded or
    not), and the contract's values; before INFERENCE_ONNXRUNTIME the session
    fails saying why."""
    rng = np.random.default_rng(5)
    x = _x(rng, op, x_dtype)
    s = np.asarray(((rng.random(3) + 0.1) * 0.7).astype(np.float32).astype(s_dtype))
    zt = z_dtype or (np.uint8 if op == Q else x_dtype)
    z = np.asarray(rng.integers(0, 20, 3)).astype(zt) if zp_form == "given" else None
    model = _model(op, x, s, z, DECLARED[declared], zp_form, axis=1,
                   output_dtype=ONNX_OF[np.dtype(out)])
    if not INFERS:
        # (with an empty zero-point name, older onnxruntime leaves the check
        # of y's type to the run)
        with pytest.raises(Exception, match="and output_dtype make it"):
            session(model, level=level).run(["y_shape"], {"x": x})
        return
    sess = session(model, level=level)
    assert sess.get_outputs()[0].type == ORT_TYPE[ONNX_OF[np.dtype(out)]]
    y, y_shape = run(sess, {"x": x}, [out, np.int64], [SHAPE, (3,)])
    assert list(y_shape) == list(SHAPE)
    want = (quantize(x, s, z, axis=1, dtype=out) if op == Q
            else dequantize(x, s, z, axis=1, output_dtype=out))
    assert_same_bits(y, want, f"{op} to {np.dtype(out).name}")


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
@pytest.mark.parametrize("declared", list(DECLARED))
def test_shapes_after_a_chain_are_right(declared, level):
    """x -> Q -> DQ -> Shape: whatever x's declaration, the shape onnxruntime
    computes (and folds, where it knows it) is x's."""
    rng = np.random.default_rng(6)
    x = _x(rng, Q, F32)
    s, z = np.float32(0.25), np.int8(3)
    nodes = [helper.make_node(Q, ["x", "s", "z"], ["q"], domain="com.amd.quark"),
             helper.make_node(DQ, ["q", "s", "z"], ["y"], domain="com.amd.quark"),
             helper.make_node("Shape", ["y"], ["y_shape"]),
             helper.make_node("Shape", ["q"], ["q_shape"])]
    outputs = [value_info("y", None), value_info("y_shape", TensorProto.INT64, [3]),
               value_info("q_shape", TensorProto.INT64, [3])]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, DECLARED[declared])], outputs,
                       [tensor("s", np.asarray(s)), tensor("z", np.asarray(z))])
    sess = session(model, level=level)
    y, y_shape, q_shape = run(sess, {"x": x}, [F32, np.int64, np.int64], [SHAPE, (3,), (3,)])
    assert list(y_shape) == list(SHAPE) and list(q_shape) == list(SHAPE)
    assert_same_bits(y, dequantize(quantize(x, s, z), s, z))


@pytest.mark.parametrize("level", LEVELS, ids=["disabled", "basic", "extended", "all"])
def test_scalar_x_keeps_its_shape(level):
    """A scalar x: y is a scalar (the callback passes no shape on for it)."""
    x = np.float32(7.3)
    nodes = [helper.make_node(Q, ["x", "s", "z"], ["y"], domain="com.amd.quark"),
             helper.make_node("Shape", ["y"], ["y_shape"])]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, [])],
                       [value_info("y", None), value_info("y_shape", TensorProto.INT64, [0])],
                       [tensor("s", np.asarray(np.float32(0.5))),
                        tensor("z", np.asarray(np.int16(1)))])
    y, y_shape = run(session(model, level=level), {"x": np.asarray(x)}, [np.int16, np.int64],
                     [(), (0,)])
    assert y_shape.size == 0
    assert_same_bits(y, quantize(np.asarray(x), np.float32(0.5), np.int16(1)))


# Where onnxruntime cannot type y by the attribute: before
# INFERENCE_ONNXRUNTIME always, from it where x's rank is not known.
NOT_TYPED = [(Q, np.float16, {"output_dtype": TensorProto.INT16},
              "the output y is uint8 but the inputs and output_dtype make it int16"),
             (DQ, np.int8, {"output_dtype": TensorProto.FLOAT},
              "the output y is float16 but the inputs and output_dtype make it float32")]


@pytest.mark.parametrize("declared", ["unknown", "scalar"] + ([] if INFERS else ["exact"]))
@pytest.mark.parametrize(("op", "x_dtype", "attrs", "message"), NOT_TYPED,
                         ids=[f[0][8:10] for f in NOT_TYPED])
def test_output_dtype_onnxruntime_cannot_give_is_a_clear_error(op, x_dtype, attrs, message,
                                                               declared):
    """The session fails naming the operator, the types and why (the NumPy
    API and extql.reference run these nodes)."""
    shape = () if declared == "scalar" else SHAPE
    x = np.ones(shape, x_dtype)
    dims = {"unknown": None, "scalar": [], "exact": list(shape)}[declared]
    model = _model(op, x, np.asarray(np.float16(1)), None, dims, "absent", **attrs)
    del model.graph.node[1], model.graph.output[1]  # (no Shape: y may be a scalar)
    with pytest.raises(Exception, match=message) as info:
        session(model, level=LEVELS[0])
    text = str(info.value)
    assert "Extended" in text and "output_dtype" in text
    assert ("rank of x" if INFERS else "before 1.24") in text


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("legacy", [False, True], ids=["extended", "legacy"])
def test_legacy_names_and_threads(legacy, threads):
    """The legacy names (com.vai.quantize) take part in the inference as the
    Extended ones do, on one thread or two."""
    rng = np.random.default_rng(8)
    x = _x(rng, DQ, np.int16)
    s, z = np.asarray(np.float32(0.125)), np.asarray(np.int16(-3))
    op, domain = (LEGACY[DQ], LEGACY_DOMAIN) if legacy else (DQ, "com.amd.quark")
    nodes = [helper.make_node(op, ["x", "s", "z"], ["y"], domain=domain,
                              output_dtype=TensorProto.FLOAT16),
             helper.make_node("Shape", ["y"], ["y_shape"])]
    model = make_model(nodes, [value_info("x", TensorProto.INT16, DECLARED["named"])],
                       [value_info("y", None), value_info("y_shape", TensorProto.INT64, [3])],
                       [tensor("s", s), tensor("z", z)], domains=(domain,))
    if not INFERS:
        with pytest.raises(Exception, match="output_dtype make it float16"):
            session(model, threads=threads)
        return
    sess = session(model, threads=threads)
    assert sess.get_outputs()[0].type == "tensor(float16)"
    y, y_shape = run(sess, {"x": x}, [F16, np.int64], [SHAPE, (3,)])
    assert list(y_shape) == list(SHAPE)
    assert_same_bits(y, dequantize(x, s, z, output_dtype=F16))


@pytest.mark.parametrize("scale_form", ["constant", "input"])
def test_each_run_checks_x_against_the_scale(scale_form):
    """The scale and zero point of a node are read once when they are
    constants (initializers) and at every run when they are graph inputs;
    either way every run checks them against that run's x: a session whose
    x has no fixed shape runs an x that fits, fails with a clear error for
    one whose axis does not fit the per-axis scale, and runs the next one
    that fits; its y's type is checked on the first run only, and later
    runs of other shapes still give the contract's bits."""
    s = np.array([0.5, 0.25, 2.0], np.float32)
    z = np.array([1, -3, 7], np.int16)
    nodes = [helper.make_node(Q, ["x", "s", "z"], ["q"], domain="com.amd.quark", axis=1),
             helper.make_node(DQ, ["q", "s", "z"], ["y"], domain="com.amd.quark", axis=1)]
    inputs = [value_info("x", TensorProto.FLOAT, [None, None])]
    feeds_of = {}
    if scale_form == "constant":
        inits = [tensor("s", s), tensor("z", z)]
    else:
        inits = []
        inputs += [value_info("s", TensorProto.FLOAT, [None]),
                   value_info("z", TensorProto.INT16, [None])]
        feeds_of = {"s": s, "z": z}
    model = make_model(nodes, inputs, [value_info("q", TensorProto.INT16, [None, None]),
                                       value_info("y", TensorProto.FLOAT, [None, None])], inits)
    sess = session(model)
    rng = np.random.default_rng(5)
    for rows, cols in [(2, 3), (2, 4), (5, 3), (1, 2), (7, 3)]:
        x = (rng.standard_normal((rows, cols)) * 300).astype(np.float32)
        if cols != 3:
            with pytest.raises(Exception, match=f"{Q}.*the scale has 3 elements but x has "
                                                f"{cols} along axis 1"):
                sess.run(None, {"x": x, **feeds_of})
            continue
        q, y = sess.run(None, {"x": x, **feeds_of})
        want = quantize(x, s, z, 1)
        assert_same_bits(q, want)
        assert_same_bits(y, dequantize(want, s, z, 1))
