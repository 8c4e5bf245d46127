"""Model builders and runners shared by the ONNX tests.

Kept free of extql imports beyond extql.ort_io (arrays in and out of
onnxruntime) so that the expectation (tests/contract.py) stays independent of
what is tested.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from contract import ALL_TYPES
from onnx import TensorProto, helper, numpy_helper

from extql import ort_io

BF16 = np.dtype(ml_dtypes.bfloat16)

#: ONNX's code (TensorProto) of every quantized type, by tests/contract.py's
#: name (the types this onnx has), and of float32, float64 and int64: the
#: tests' one table of type codes.
ONNX_OF: dict[str, int] = {
    **{name: getattr(TensorProto, name.upper()) for name in ALL_TYPES
       if hasattr(TensorProto, name.upper())},
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "int64": TensorProto.INT64,
}
#: The same by NumPy dtype (ml_dtypes' for bfloat16, the sub-byte and small
#: float types).
ONNX_OF_DTYPE: dict[np.dtype, int] = {
    (ALL_TYPES[name][0] if name in ALL_TYPES else np.dtype(name)): code
    for name, code in ONNX_OF.items()
}
DOMAIN = "com.amd.quark"
LEGACY = "com.vai.quantize"
NAMES = {
    DOMAIN: ("ExtendedQuantizeLinear", "ExtendedDequantizeLinear"),
    LEGACY: ("VitisQuantizeLinear", "VitisDequantizeLinear"),
}


def onnx_type(dtype: np.dtype) -> int:
    dtype = np.dtype(dtype)
    if dtype == BF16:
        return TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(dtype)


def tensor(name: str, value: np.ndarray) -> onnx.TensorProto:
    value = np.asarray(value)
    if value.dtype == BF16:
        t = helper.make_tensor(
            name, TensorProto.BFLOAT16, value.shape, value.view(np.uint16).tobytes(), raw=True
        )
        return t
    return numpy_helper.from_array(value, name)


def value_info(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def make_model(
    nodes,
    inputs,
    outputs,
    initializers=(),
    *,
    opset: int = 21,
    domains=(DOMAIN,),
    ir_version: int = 10,
    value_infos=(),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes), "g", list(inputs), list(outputs), list(initializers),
        value_info=list(value_infos),
    )
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports, ir_version=ir_version)


def qdq_model(
    qtype: str | None,
    x_shape,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    *,
    axis: int | None = None,
    opset: int = 21,
    domain: str = DOMAIN,
    chain: str = "qdq",
) -> onnx.ModelProto:
    """x (float32 input) -> Q -> y (output) [-> DQ -> z (output)].

    chain: "q" (quantize only), "qdq" (both, the quantized tensor is an output
    too), or "dq" (x is the quantized input of a lone dequantize).
    """
    qname, dqname = NAMES[domain]
    inits = [tensor("s", scale)]
    zp_in = []
    if zero_point is not None:
        inits.append(tensor("zp", zero_point))
        zp_in = ["zp"]
    attrs = {} if axis is None else {"axis": axis}
    out_type = ONNX_OF[qtype] if qtype else TensorProto.UINT8
    if chain == "dq":
        node = helper.make_node(dqname, ["x", "s", *zp_in], ["z"], domain=domain, **attrs)
        return make_model(
            [node],
            [value_info("x", out_type, x_shape)],
            [value_info("z", TensorProto.FLOAT, x_shape)],
            inits,
            opset=opset,
            domains=(domain,),
        )
    nodes = [helper.make_node(qname, ["x", "s", *zp_in], ["y"], domain=domain, **attrs)]
    outputs = [value_info("y", out_type, x_shape)]
    if chain == "qdq":
        nodes.append(helper.make_node(dqname, ["y", "s", *zp_in], ["z"], domain=domain, **attrs))
        outputs.append(value_info("z", TensorProto.FLOAT, x_shape))
    return make_model(
        nodes,
        [value_info("x", TensorProto.FLOAT, x_shape)],
        outputs,
        inits,
        opset=opset,
        domains=(domain,),
    )


def _elem_of_type(tp: onnx.TypeProto) -> int:
    return tp.tensor_type.elem_type


def _np_of(elem: int) -> np.dtype:
    if elem == TensorProto.BFLOAT16:
        return BF16
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


def run_ort(
    model: onnx.ModelProto | str,
    feeds: dict[str, np.ndarray],
    *,
    options: ort.SessionOptions | None = None,
    output_shapes: dict[str, tuple] | None = None,
) -> dict[str, np.ndarray]:
    """Run on the CPU provider; inputs and outputs go through IOBinding
    (extql.ort_io), bfloat16 included (where this onnxruntime cannot bind
    it, through the model rewritten by ort_io.without_bfloat16_io).

    Output shapes must be given for outputs whose declared shape is not static
    (they are preallocated)."""
    widened: dict[str, str] = {}
    if not ort_io.has_typed_ortvalues():
        model, feeds, widened = ort_io.without_bfloat16_io(model, feeds)
    data = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    binding = sess.io_binding()
    alive = ort_io.bind_inputs(binding, feeds)
    results = {}
    for out in proto.graph.output:
        name = widened.get(out.name, out.name)
        if output_shapes and name in output_shapes:
            shape = output_shapes[name]
        else:
            shape = tuple(d.dim_value for d in out.type.tensor_type.shape.dim)
        results[out.name] = np.zeros(shape, _np_of(_elem_of_type(out.type)))
    alive += ort_io.bind_outputs(binding, results)
    sess.run_with_iobinding(binding)
    # The bound buffers were written in place; widened ones narrow back bit for bit.
    return {widened.get(k, k): (ort_io.narrow_bfloat16(v) if k in widened else v)
            for k, v in results.items()}


def run_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], new_ops=None):
    from onnx.reference import ReferenceEvaluator

    ev = ReferenceEvaluator(model, new_ops=new_ops)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ev.run(None, feeds), strict=True))


def ort_honours_overload() -> bool:
    """Whether the installed onnxruntime resolves model-local functions by
    (domain, name, overload) (microsoft/onnxruntime#28275) rather than by
    (domain, name), found by running a model with two overloads."""

    def fn(overload: str, value: float) -> onnx.FunctionProto:
        node = helper.make_node("Constant", [], ["y"], value_float=value)
        f = helper.make_function("probe", "F", [], ["y"], [node], [helper.make_opsetid("", 21)])
        f.overload = overload
        return f

    call = helper.make_node("F", [], ["y"], domain="probe")
    call.overload = "a"
    graph = helper.make_graph([call], "g", [], [helper.make_tensor_value_info("y", 1, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("probe", 1)],
                              functions=[fn("a", 1.0), fn("b", 2.0)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return float(sess.run(None, {})[0]) == 1.0


def ort_float16_cast_keeps_payload() -> bool:
    """Whether onnxruntime's float32 -> float16 Cast keeps NaN payloads
    (true for its vector path in recent releases; 1.18 drops them)."""
    x = np.full(64, np.uint32(0x7FC12345)).view(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return bool((sess.run(None, {"x": x})[0].view(np.uint16) == 0x7E09).all())
