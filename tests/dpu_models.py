"""One-node models of Quark's DPU-emulation operators (instance norm, LSTM),
under either name, for the tests of the reference ops, the tools and the
fallbacks to share: :func:`in_model`, :func:`lstm_model` and
:func:`lstm_node_attrs` (a stored case's attributes as the node carries them)."""

from __future__ import annotations

from onnx import ModelProto, TensorProto, helper

IN_DOMAINS = {"ExtendedInstanceNormalization": "com.amd.quark",
              "VitisInstanceNormalization": "com.vai.quantize"}
LSTM_DOMAINS = {"ExtendedLSTM": "com.amd.quark", "VitisLSTM": "com.vai.quantize"}
F = TensorProto.FLOAT


def in_model(op: str = "ExtendedInstanceNormalization", x_shape=None, c=None,
             epsilon: float | None = None, name: str = "in_node",
             x: str = "x", y: str = "y", y_shape=None) -> ModelProto:
    """x, scale, B (graph inputs) -> the instance norm -> y."""
    attrs = {} if epsilon is None else {"epsilon": float(epsilon)}
    node = helper.make_node(op, [x, "scale", "B"], [y], name=name, domain=IN_DOMAINS[op],
                            **attrs)
    cs = None if c is None else [c]
    graph = helper.make_graph(
        [node], "in", [helper.make_tensor_value_info(x, F, x_shape),
                       helper.make_tensor_value_info("scale", F, cs),
                       helper.make_tensor_value_info("B", F, cs)],
        [helper.make_tensor_value_info(y, F, y_shape)])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(IN_DOMAINS[op], 1)])


def lstm_model(attrs: dict, op: str = "ExtendedLSTM", x_shape=None, w_shape=None,
               r_shape=None, b_shape=None, outputs=("Y",), with_b: bool = True,
               name: str = "lstm_node", initializers=(), y_shapes=None) -> ModelProto:
    """X, W, R (and B) -> the LSTM -> the named outputs (Y, Y_h, Y_c; an
    empty name leaves that output out); W / R / B may come as initializers."""
    names = ["X", "W", "R"] + (["B"] if with_b else [])
    node = helper.make_node(op, names, list(outputs), name=name, domain=LSTM_DOMAINS[op],
                            **attrs)
    init_names = {t.name for t in initializers}
    shapes = {"X": x_shape, "W": w_shape, "R": r_shape, "B": b_shape}
    graph = helper.make_graph(
        [node], "lstm",
        [helper.make_tensor_value_info(n, F, shapes[n]) for n in names if n not in init_names],
        [helper.make_tensor_value_info(o, F, None if y_shapes is None else y_shapes[i])
         for i, o in enumerate(outputs) if o],
        initializer=list(initializers))
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(LSTM_DOMAINS[op], 1)])


def lstm_node_attrs(case: dict) -> dict:
    """A stored case's attributes as a node carries them."""
    return dict(case["attrs"])
