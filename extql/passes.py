"""Graph passes for models with Extended (and legacy Vitis) Q/DQ nodes.

* :func:`attach_fallbacks` -- add the fallback function definitions, so the
  model runs without the extql library (onnxruntime, onnx.reference) while
  the native kernel still wins where the library is registered;
* :func:`inline_fallbacks` -- replace every Extended node by standard ops;
* :func:`lower_to_standard` -- rewrite Extended nodes as official
  QuantizeLinear/DequantizeLinear where that operator gives the same bits.

All passes take a ``ModelProto`` and return a new one (the input is not
modified).  Nodes inside subgraphs (If/Loop/Scan bodies) are handled too.
They find the element types of zero points from initializers, Constant nodes,
graph inputs, value_info and onnx shape inference; when a type cannot be
found they raise a ``ValueError`` that names the node and says what to add.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator

import numpy as np
import onnx
import onnx.inliner
from onnx import TensorProto, helper, numpy_helper

from . import fallbacks
from .fallbacks import OP_NAMES
from .microsoft_ops import MS_DEQUANTIZE_TYPES, MS_DOMAIN, MS_QDQ, MS_QUANTIZE_TYPES
from .types import BY_ONNX, QTYPES

__all__ = [
    "attach_fallbacks",
    "inline_fallbacks",
    "lower_to_standard",
    "ExtNode",
    "extended_nodes",
    "infer_types",
    "model_opset",
    "FUNCTION_IR_VERSION",
]

#: NodeProto.overload needs IR version 10; attach raises older models to it.
FUNCTION_IR_VERSION = 10

_OPS: dict[tuple[str, str], bool] = {
    (domain, name): i == 0 for domain, names in OP_NAMES.items() for i, name in enumerate(names)
}


@dataclasses.dataclass
class ExtNode:
    """An Extended Q/DQ node and what is known about it."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    quantize: bool

    @property
    def microsoft(self) -> bool:
        """A com.microsoft QuantizeLinear / DequantizeLinear node."""
        return self.node.domain == MS_DOMAIN

    @property
    def has_zero_point(self) -> bool:
        return len(self.node.input) >= 3 and self.node.input[2] != ""

    @property
    def label(self) -> str:
        name = self.node.name or f"(unnamed, output {self.node.output[0]!r})"
        return f"{self.node.op_type} node {name}"

    @property
    def axis(self) -> int:
        for attr in self.node.attribute:
            if attr.name == "axis":
                return int(attr.i)
        return 1


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def extended_nodes(model: onnx.ModelProto, *, microsoft: bool = False) -> list[ExtNode]:
    """Every ExtendedQuantizeLinear/ExtendedDequantizeLinear (and legacy Vitis)
    node of the model, subgraphs included, in graph order; with
    ``microsoft``, the com.microsoft QuantizeLinear / DequantizeLinear nodes
    too (see :mod:`extql.microsoft_ops`)."""
    out = []
    for graph in _graphs(model.graph):
        for node in graph.node:
            key = (node.domain, node.op_type)
            if key in _OPS:
                out.append(ExtNode(node, graph, _OPS[key]))
            elif microsoft and node.domain == MS_DOMAIN and node.op_type in MS_QDQ:
                out.append(ExtNode(node, graph, MS_QDQ[node.op_type]))
    return out


def model_opset(model: onnx.ModelProto, domain: str = "") -> int | None:
    """The version the model imports for ``domain`` ("" = ai.onnx), or None."""
    for imp in model.opset_import:
        if imp.domain == domain or (domain == "" and imp.domain == "ai.onnx"):
            return int(imp.version)
    return None


def _set_opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    if model_opset(model, domain) is None:
        model.opset_import.append(helper.make_opsetid(domain, version))


@dataclasses.dataclass
class TypeInfo:
    elem_type: int
    shape: tuple[int | str | None, ...] | None  # None: rank unknown


def _type_info(tp: onnx.TypeProto) -> TypeInfo | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if tt.elem_type == 0:
        return None
    shape = None
    if tt.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim
        )
    return TypeInfo(tt.elem_type, shape)


_INFER_KEEP_BYTES = 1 << 16


def infer_types(model: onnx.ModelProto) -> dict[str, TypeInfo]:
    """Element type and shape of every value that can be known, by name.

    Runs onnx shape inference (which knows the Extended operators once
    :mod:`extql.opset` has registered their schemas) on a copy of the model and
    collects graph inputs, outputs, value_info, initializers and Constant
    outputs of the main graph and all subgraphs.  Inference errors are not
    fatal: what was known before is kept.
    """
    from . import opset  # noqa: F401  (registers the schemas)

    # Inference needs the initializers' types and shapes, not their contents:
    # large ones are emptied for the call (models over 2 GiB cannot be
    # serialised for it otherwise, and it is faster).
    stashed = []
    for graph in _graphs(model.graph):
        for init in graph.initializer:
            if len(init.raw_data) > _INFER_KEEP_BYTES:
                stashed.append((init, init.raw_data))
                init.ClearField("raw_data")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a model inference cannot handle is still usable
        inferred = model
    finally:
        for init, data in stashed:
            init.raw_data = data
    types: dict[str, TypeInfo] = {}
    for source in (model, inferred):
        for graph in _graphs(source.graph):
            for vi in (*graph.input, *graph.value_info, *graph.output):
                info = _type_info(vi.type)
                if info is not None and (vi.name not in types or types[vi.name].shape is None):
                    types[vi.name] = info
            for init in graph.initializer:
                types[init.name] = TypeInfo(init.data_type, tuple(init.dims))
            for node in graph.node:
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                    for attr in node.attribute:
                        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                            types[node.output[0]] = TypeInfo(attr.t.data_type, tuple(attr.t.dims))
    return types


def _zero_point_type(ext: ExtNode, types: dict[str, TypeInfo]) -> int | None:
    """ONNX type code of the zero point (for dequantize: of x when the zero
    point's own type is unknown); None without a zero point.  Raises
    ValueError when the type is needed but unknown."""
    node = ext.node
    if not ext.has_zero_point:
        return None
    info = types.get(node.input[2])
    if info is None and not ext.quantize:
        info = types.get(node.input[0])
    if info is None:
        raise ValueError(
            f"{ext.label}: cannot determine the element type of the zero point "
            f"{node.input[2]!r}; give the model a value_info (or graph input type) for it, "
            "or make it an initializer"
        )
    if info.elem_type not in BY_ONNX:
        raise ValueError(
            f"{ext.label}: the zero point {node.input[2]!r} has type "
            f"{helper.tensor_dtype_to_string(info.elem_type)}, which is not one of "
            f"{', '.join(QTYPES)}"
        )
    return info.elem_type


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _default_opset_for_functions(model: onnx.ModelProto) -> int:
    version = model_opset(model, "")
    if version is None:
        # No default-domain import means no default-domain node: importing one
        # cannot change the meaning of anything.
        model.opset_import.append(helper.make_opsetid("", 21))
        return 21
    if version < fallbacks.MIN_OPSET:
        raise ValueError(
            f"the fallback functions need a default-domain (ai.onnx) opset >= "
            f"{fallbacks.MIN_OPSET}, the model imports {version}; convert it first, e.g. "
            f"onnx.version_converter.convert_version(model, {fallbacks.MIN_OPSET})"
        )
    return version


def attach_fallbacks(model: onnx.ModelProto) -> onnx.ModelProto:
    """Add the fallback FunctionProtos for the Extended nodes of ``model``.

    One function per (operator, type) in use, named after the operator in its
    own domain (``com.amd.quark`` or ``com.vai.quantize``) and told apart by
    ``overload`` (the type name, or ``"default"`` without a zero point); each
    node gets the matching ``overload``.  onnxruntime resolves a model-local
    function by (domain, name, overload) and uses it only when no kernel is
    registered for the operator, so with the extql library registered the
    native kernel still runs.  ``onnx.reference`` (1.23) and onnxruntime
    releases before overload support (2026) ignore ``overload`` and use the
    last function of a name: when one operator is used with several types, a
    type-generic dispatcher with an empty overload is added last for it (needs
    ai.onnx opset >= 15; otherwise a warning says so), and the operator's
    nodes without a zero point get an explicit all-zero one (uint8 for
    quantize, x's type for dequantize, the scale's shape), which means the
    same and gives the dispatcher the output type.

    Nodes without a zero point get an explicit empty third input, and nodes
    without ``axis`` an explicit ``axis=1`` (the same meaning; onnx.reference
    needs both) so that every call matches the three-input functions.  The IR
    version is raised to 10 if lower (``overload`` needs it); opsets are not
    changed, the functions are stamped with the model's ai.onnx version
    (>= 13).  Existing fallback functions are replaced, so attaching twice is
    harmless.
    """
    out = _copy(model)
    nodes = extended_nodes(out)
    if not nodes:
        return out
    opset = _default_opset_for_functions(out)
    types = infer_types(out)
    used: dict[tuple[str, bool], list[str]] = {}
    variant_of: dict[int, str] = {}
    groups: dict[tuple[str, bool], list[ExtNode]] = {}
    for ext in nodes:
        _validate_static(ext, types)
        variant_of[id(ext.node)] = fallbacks._variant(_zero_point_type(ext, types))
        groups.setdefault((ext.node.domain, ext.quantize), []).append(ext)
    # Runtimes that ignore ``overload`` run one (type-generic) function for
    # every node of an operator, and its output type comes from the zero
    # point: where an operator has several variants, nodes without a zero
    # point get an explicit zero (the meaning of an absent one).
    for members in groups.values():
        if len({variant_of[id(e.node)] for e in members}) < 2:
            continue
        for ext in members:
            if variant_of[id(ext.node)] == "default":
                code = _materialize_zero_point(out, ext, types)
                if code is not None:
                    variant_of[id(ext.node)] = fallbacks._variant(code)
    used: dict[tuple[str, bool], list[str]] = {}
    for ext in nodes:
        variant = variant_of[id(ext.node)]
        ext.node.overload = variant
        if not any(a.name == "axis" for a in ext.node.attribute):
            # onnx.reference ignores a function's attribute defaults.
            ext.node.attribute.append(helper.make_attribute("axis", 1))
        while len(ext.node.input) < 3:
            ext.node.input.append("")
        variants = used.setdefault((ext.node.domain, ext.quantize), [])
        if variant not in variants:
            variants.append(variant)
    names = {(d, OP_NAMES[d][0 if q else 1]) for d, q in used}
    kept = [f for f in out.functions if (f.domain, f.name) not in names]
    del out.functions[:]
    out.functions.extend(kept)
    for (domain, quantize), variants in sorted(used.items()):
        _set_opset(out, domain, 1)
        for variant in variants:
            out.functions.append(
                fallbacks.function_proto(quantize, variant, domain=domain, opset=opset)
            )
    for (domain, quantize), variants in sorted(used.items()):
        if len(variants) < 2:
            continue
        op_name = OP_NAMES[domain][0 if quantize else 1]
        problem = None
        if opset < fallbacks.DISPATCH_MIN_OPSET:
            problem = f"the model's ai.onnx opset {opset} is below {fallbacks.DISPATCH_MIN_OPSET}"
        elif "default" in variants:
            problem = ("a node without a zero point has a scale of unknown shape, so no "
                       "explicit zero could be given to it")
        if problem is None:
            # Listed last: onnx.reference and onnxruntime without overload
            # support keep the last function of a name.
            out.functions.append(fallbacks.dispatcher_proto(quantize, domain=domain, opset=opset))
        else:
            warnings.warn(
                f"{op_name} is used with several types ({', '.join(variants)}) and {problem}: "
                "onnxruntime with overload support runs the per-type functions, but "
                "onnx.reference (use new_ops=extql.reference.OPS) and older onnxruntime "
                "releases, which ignore NodeProto.overload, cannot run this model's fallbacks",
                stacklevel=2,
            )
    if out.ir_version < FUNCTION_IR_VERSION:
        out.ir_version = FUNCTION_IR_VERSION
    return out


def _materialize_zero_point(
    model: onnx.ModelProto, ext: ExtNode, types: dict[str, TypeInfo]
) -> int | None:
    """Give a node without zero point an explicit all-zero one (uint8 for
    quantize, x's type for dequantize) of the scale's shape, as an
    initializer of the node's graph; returns its type code, or None when the
    scale's shape or x's type is unknown."""
    node = ext.node
    s_shape = _static_shape(node.input[1], types)
    if s_shape is None or not all(isinstance(d, int) for d in s_shape):
        return None
    if ext.quantize:
        code = TensorProto.UINT8
    else:
        x_info = types.get(node.input[0])
        if x_info is None or x_info.elem_type not in BY_ONNX:
            return None
        code = x_info.elem_type
    qt = BY_ONNX[code]
    name = f"{node.input[1]}__extql_zero_{qt.name}"
    graph = ext.graph
    if not any(i.name == name for i in graph.initializer):
        zeros = np.zeros(s_shape, qt.dtype)
        if qt.name == "bfloat16":
            tensor = helper.make_tensor(name, code, s_shape, zeros.view(np.uint16).tobytes(),
                                        raw=True)
        else:
            tensor = numpy_helper.from_array(zeros, name)
        graph.initializer.append(tensor)
    while len(node.input) < 3:
        node.input.append("")
    node.input[2] = name
    types[name] = TypeInfo(code, tuple(s_shape))
    return code


# --------------------------------------------------------------------------
# Static validation shared by the passes and ``extql check``.


def _static_shape(name: str, types: dict[str, TypeInfo]) -> tuple | None:
    info = types.get(name)
    return None if info is None else info.shape


def _validate_static(ext: ExtNode, types: dict[str, TypeInfo]) -> list[str]:
    """Problems that are certain from the static types and shapes (raise on
    the first); returns nothing when all is well or unknown."""
    problems = check_node(ext, types)
    if problems:
        raise ValueError(f"{ext.label}: {problems[0]}")
    return problems


def check_node(ext: ExtNode, types: dict[str, TypeInfo]) -> list[str]:
    """Every problem of one Extended (or com.microsoft Q/DQ) node that the
    static types/shapes prove.  com.microsoft nodes are held to onnxruntime's
    types for them (:mod:`extql.microsoft_ops`), the Extended ones to extql's.

    Checks the input count, the types of x, the scale and the zero point, the
    scale's rank, the zero point's shape against the scale's, the axis range
    and the scale length against ``D[axis]`` (where the shapes are known).
    Unknown types and shapes are not problems (they are checked at run time).
    """
    node = ext.node
    problems: list[str] = []
    n_in = len(node.input)
    if not 2 <= n_in <= 3:
        return [f"has {n_in} inputs, expected 2 or 3 (x, scale[, zero point])"]
    if len(node.output) != 1:
        problems.append(f"has {len(node.output)} outputs, expected 1")
    for attr in node.attribute:
        if attr.name != "axis":
            problems.append(f"has an unknown attribute {attr.name!r} (only 'axis' is defined)")
        elif attr.type != onnx.AttributeProto.INT:
            problems.append("attribute 'axis' must be an INT")
    x_name, s_name = node.input[0], node.input[1]
    z_name = node.input[2] if ext.has_zero_point else None
    if not x_name or not s_name:
        problems.append("x and the scale are required inputs and must not be empty")
        return problems
    x, s = types.get(x_name), types.get(s_name)
    z = types.get(z_name) if z_name else None

    def tname(code: int) -> str:
        return helper.tensor_dtype_to_string(code).replace("TensorProto.", "").lower()

    if ext.microsoft:
        allowed = MS_QUANTIZE_TYPES if ext.quantize else MS_DEQUANTIZE_TYPES
        floats = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}
    else:
        allowed = set(BY_ONNX)
        floats = {TensorProto.FLOAT: "float32"}
    names = ", ".join(sorted(tname(c) for c in allowed))
    float_names = " or ".join(floats.values())
    if ext.quantize:
        if x is not None and x.elem_type not in floats:
            problems.append(f"x {x_name!r} must be {float_names}, it is {tname(x.elem_type)}")
        if z is not None and z.elem_type not in allowed:
            problems.append(
                f"the zero point {z_name!r} must be one of {names}, it is {tname(z.elem_type)}"
            )
    else:
        if x is not None and x.elem_type not in allowed:
            problems.append(f"x {x_name!r} must be one of {names}, it is {tname(x.elem_type)}")
        if x is not None and z is not None and z.elem_type != x.elem_type:
            problems.append(
                f"the zero point {z_name!r} must have the type of x ({tname(x.elem_type)}), "
                f"it is {tname(z.elem_type)}"
            )
    if s is not None and s.elem_type not in floats:
        problems.append(
            f"the scale {s_name!r} must be {float_names}, it is {tname(s.elem_type)}"
        )
    if (ext.microsoft and ext.quantize and x is not None and s is not None
            and x.elem_type in floats and s.elem_type in floats and x.elem_type != s.elem_type):
        problems.append(
            f"the scale {s_name!r} must have the type of x ({tname(x.elem_type)}), "
            f"it is {tname(s.elem_type)}"
        )
    s_shape = s.shape if s is not None else None
    z_shape = z.shape if z is not None else None
    x_shape = x.shape if x is not None else None
    if s_shape is not None and len(s_shape) >= 2:
        problems.append(f"the scale {s_name!r} must be a scalar or 1-D, it has shape {s_shape}")
        return problems
    if s_shape is not None and z_shape is not None:
        s_one = len(s_shape) == 0 or s_shape[0] == 1
        z_one = len(z_shape) == 0 or (len(z_shape) == 1 and z_shape[0] == 1)
        if s_one:
            if not z_one and all(isinstance(d, int) for d in z_shape):
                problems.append(
                    f"the zero point {z_name!r} must have the shape of the scale {s_shape}, "
                    f"it has {z_shape}"
                )
        elif tuple(z_shape) != tuple(s_shape) and all(
            isinstance(d, int) for d in (*z_shape, *s_shape)
        ):
            problems.append(
                f"the zero point {z_name!r} must have the shape of the scale {s_shape}, "
                f"it has {z_shape}"
            )
    per_axis = s_shape is not None and len(s_shape) == 1 and s_shape[0] != 1
    if per_axis and x_shape is not None:
        rank = len(x_shape)
        axis = ext.axis
        if not -rank <= axis < rank:
            problems.append(f"axis {axis} is out of range for x of rank {rank}")
        else:
            dim = x_shape[axis % rank]
            if isinstance(dim, int) and isinstance(s_shape[0], int) and dim != s_shape[0]:
                problems.append(
                    f"the scale has {s_shape[0]} elements but x has {dim} along axis "
                    f"{axis % rank} (shape {x_shape})"
                )
    return problems


# --------------------------------------------------------------------------
# inline


def _static_param_shape(ext: ExtNode, types: dict[str, TypeInfo]) -> list[int] | None:
    """The shape scale/zero point are reshaped to, when the static shapes fix
    it: [] per tensor, [D, 1, ...] per axis; None when unknown."""
    s_shape = _static_shape(ext.node.input[1], types)
    if s_shape is None or len(s_shape) > 1:
        return None
    if len(s_shape) == 0 or s_shape[0] == 1:
        return []
    x_shape = _static_shape(ext.node.input[0], types)
    if x_shape is None or not isinstance(s_shape[0], int):
        return None
    rank = len(x_shape)
    axis = ext.axis % rank
    return [s_shape[0]] + [1] * (rank - 1 - axis)


class _Names:
    """Fresh value names that collide with nothing in the model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.used: set[str] = set()
        for graph in _graphs(model.graph):
            self.used.update(i.name for i in graph.input)
            self.used.update(i.name for i in graph.initializer)
            for node in graph.node:
                self.used.update(node.output)
                self.used.update(node.input)
                if node.name:
                    self.used.add(node.name)
        self.count = 0

    def __call__(self, base: str) -> str:
        while True:
            self.count += 1
            name = f"{base}__extql{self.count}"
            if name not in self.used:
                self.used.add(name)
                return name


def inline_fallbacks(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace every Extended (and legacy Vitis) node by standard ONNX ops.

    Where the static shapes fix the granularity (the usual case: the scale is
    an initializer and x's rank is known) the scale and zero point are
    reshaped by a constant shape; otherwise the run-time granularity logic of
    the fallback functions is inlined.  The type and shape of each replaced
    node's output, where known, are kept as value_info; onnx shape inference
    with ``data_prop=True`` also finds them from the ops alone.  The result
    has no ``com.amd.quark`` / ``com.vai.quantize`` node, function or opset
    import left (other model-local functions are kept).  The IR version is raised to 10 if lower.

    com.microsoft QuantizeLinear / DequantizeLinear nodes (which AMD Quark
    writes for the 8/16-bit types) are replaced too, so the result needs no
    contrib operator either: they are first renamed to the Extended operators
    where both mean the same bits (:func:`extql.microsoft_ops.to_extended`,
    which raises a ``ValueError`` naming any other).
    """
    from .microsoft_ops import to_extended

    out = attach_fallbacks(to_extended(model))
    nodes = extended_nodes(out)
    if not nodes:
        return out
    opset = model_opset(out, "")
    assert opset is not None
    types = infer_types(out)
    names = _Names(out)
    cores: dict[str, onnx.FunctionProto] = {}
    for ext in nodes:
        _record_output_type(ext, types)
        pshape = _static_param_shape(ext, types)
        if pshape is None:
            continue  # keep the call: the flat function is inlined below
        node = ext.node
        variant = node.overload
        core = fallbacks.core_proto(ext.quantize, variant, opset=opset)
        cores[core.name] = core
        new_nodes = []
        args = [node.input[0]]
        params = [node.input[1]] + ([node.input[2]] if variant != "default" else [])
        shape_name = None
        for p in params:
            p_shape = _static_shape(p, types)
            if p_shape is not None and list(p_shape) == pshape:
                args.append(p)
                continue
            if shape_name is None:
                shape_name = names("param_shape")
                new_nodes.append(
                    helper.make_node(
                        "Constant",
                        [],
                        [shape_name],
                        value=numpy_helper.from_array(np.array(pshape, np.int64)),
                    )
                )
            reshaped = names(p)
            new_nodes.append(helper.make_node("Reshape", [p, shape_name], [reshaped]))
            args.append(reshaped)
        call = helper.make_node(core.name, args, list(node.output), domain=core.domain)
        new_nodes.append(call)
        _replace_node(ext.graph, node, new_nodes)
    # Calls left (unknown static shapes) go to the flat per-variant function.
    # Give every function a unique name instead of relying on ``overload``
    # (not every inliner honours it) and drop the dispatchers.
    for ext in nodes:
        node = ext.node
        if (node.domain, node.op_type) in _OPS:
            node.op_type = f"{node.op_type}__{node.overload}"
            node.overload = ""
    functions = []
    for f in out.functions:
        if f.domain in OP_NAMES:
            if not f.overload:
                continue  # a dispatcher
            f.name = f"{f.name}__{f.overload}"
            f.overload = ""
        functions.append(f)
    functions.extend(cores.values())
    del out.functions[:]
    out.functions.extend(functions)
    if cores:
        _set_opset(out, fallbacks.CORE_DOMAIN, 1)
    ours = (*OP_NAMES, fallbacks.CORE_DOMAIN)
    ids = sorted({(f.domain, f.name) for f in out.functions if f.domain in ours})
    # The inliner serialises the model: leave large tensor contents out of it
    # (2 GiB limit) and put them back by name afterwards.
    stashed: dict[str, bytes] = {}
    for graph in _graphs(out.graph):
        for init in graph.initializer:
            if len(init.raw_data) > _INFER_KEEP_BYTES and init.name not in stashed:
                stashed[init.name] = init.raw_data
                init.ClearField("raw_data")
    out = onnx.inliner.inline_selected_functions(out, ids, exclude=False)
    for graph in _graphs(out.graph):
        for init in graph.initializer:
            if init.name in stashed and not init.raw_data:
                init.raw_data = stashed[init.name]
    kept = [f for f in out.functions if f.domain not in ours]
    del out.functions[:]
    out.functions.extend(kept)
    _drop_unused_imports(out, (*ours, MS_DOMAIN))
    return out


def _record_output_type(ext: ExtNode, types: dict[str, TypeInfo]) -> None:
    """Keep what is known of an Extended node's output as value_info, since
    parts of the inlined bodies (the float16 cast, run-time granularity) have
    shapes that onnx inference finds only with data propagation."""
    name = ext.node.output[0]
    info = types.get(name)
    graph = ext.graph
    if info is None or info.shape is None:
        return
    if any(v.name == name for v in (*graph.value_info, *graph.output, *graph.input)):
        return
    graph.value_info.append(helper.make_tensor_value_info(name, info.elem_type, info.shape))


def _replace_node(graph: onnx.GraphProto, node: onnx.NodeProto, new: list[onnx.NodeProto]):
    for i, n in enumerate(graph.node):
        if n is node:
            del graph.node[i]
            for j, m in enumerate(new):
                graph.node.insert(i + j, m)
            return
    raise AssertionError("node not found in its graph")


def _drop_unused_imports(model: onnx.ModelProto, domains) -> None:
    used = {n.domain for g in _graphs(model.graph) for n in g.node}
    for f in model.functions:
        used.update(n.domain for n in f.node)
    keep = [o for o in model.opset_import if o.domain not in domains or o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)


# --------------------------------------------------------------------------
# lower


@dataclasses.dataclass(frozen=True)
class _Official:
    """When the official operator is bit-identical, and from which opset."""

    per_tensor: int  # minimum ai.onnx opset, per-tensor
    per_axis: int  # minimum ai.onnx opset, per-axis


# Verified against the contract in tests/test_passes.py (onnxruntime).
_OFFICIAL_Q = {
    "int8": _Official(10, 13),
    "uint8": _Official(10, 13),
    "default": _Official(10, 13),
    "int16": _Official(21, 21),
    "uint16": _Official(21, 21),
}
_OFFICIAL_DQ = {
    "int8": _Official(10, 13),
    "uint8": _Official(10, 13),
    "default": _Official(10, 13),
    "int16": _Official(21, 21),
    "uint16": _Official(21, 21),
    "int32": _Official(10, 13),  # only without a zero point or with an all-zero one
}


def _constant_value(name: str, graph_stack: list[onnx.GraphProto]) -> np.ndarray | None:
    for graph in graph_stack:
        for init in graph.initializer:
            if init.name == name:
                if init.data_location == TensorProto.EXTERNAL and not init.raw_data:
                    return None
                return numpy_helper.to_array(init)
        for node in graph.node:
            is_constant = node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            if is_constant and name in node.output:
                for attr in node.attribute:
                    if attr.name == "value":
                        return numpy_helper.to_array(attr.t)
    return None


def lower_to_standard(
    model: onnx.ModelProto, *, report: list[str] | None = None
) -> onnx.ModelProto:
    """Rewrite Extended nodes as official QuantizeLinear/DequantizeLinear where
    that operator gives the same bits, so onnxruntime can fuse them again.

    com.microsoft QuantizeLinear / DequantizeLinear nodes (float32 x and
    scale) are lowered by the same rules; a com.microsoft node that the
    model's opset cannot express (16-bit below opset 21) stays as it is.

    Lowered: quantize to int8/uint8 (and without a zero point) and int16/uint16;
    dequantize of int8/uint8/int16/uint16, and of int32 without a zero point or
    with a constant all-zero one (the official int32 dequantize computes the
    difference in 32 bits).  Per-tensor needs ai.onnx opset >= 10 (21 for the
    16-bit types), per-axis >= 13 (21).  Everything else is left as it is; the
    reason for each node left is appended to ``report`` (when given) and
    issued as a warning when the model's opset is too old.  The model's
    opset is never changed (raising it could change the meaning of other
    nodes); a model without any ai.onnx import gets opset 21.  Fallback
    functions of operators with no node left are removed, with their domain's
    opset import.
    """
    out = _copy(model)
    nodes = extended_nodes(out, microsoft=True)
    if not nodes:
        return out
    if model_opset(out, "") is None:
        out.opset_import.append(helper.make_opsetid("", 21))
    opset = model_opset(out, "")
    assert opset is not None
    types = infer_types(out)
    messages: list[str] = [] if report is None else report
    for ext in nodes:
        node = ext.node
        problems = check_node(ext, types)
        if problems:
            messages.append(f"{ext.label}: left as is: {problems[0]}")
            continue
        if ext.microsoft and not _float32_inputs(ext, types):
            messages.append(f"{ext.label}: left as is: x and the scale are not both float32")
            continue
        try:
            variant = fallbacks._variant(_zero_point_type(ext, types))
        except ValueError as exc:
            messages.append(f"{exc}; left as is")
            continue
        table = _OFFICIAL_Q if ext.quantize else _OFFICIAL_DQ
        official = table.get(variant)
        if official is None:
            what = "quantize to" if ext.quantize else "dequantize of"
            messages.append(
                f"{ext.label}: left as is: the official operator has no bit-identical "
                f"{what} {variant}"
            )
            continue
        if not ext.quantize and variant == "int32":
            zp = _constant_value(node.input[2], [ext.graph, out.graph])
            if zp is None or np.any(zp != 0):
                messages.append(
                    f"{ext.label}: left as is: the official int32 DequantizeLinear computes "
                    "x - zero_point in 32 bits; only a constant all-zero zero point is exact"
                )
                continue
        s_shape = _static_shape(node.input[1], types)
        per_tensor = s_shape is not None and (len(s_shape) == 0 or s_shape[0] == 1)
        needed = official.per_tensor if per_tensor else official.per_axis
        if opset < needed:
            msg = (
                f"{ext.label}: left as is: the official "
                f"{'QuantizeLinear' if ext.quantize else 'DequantizeLinear'} for {variant} "
                f"{'per tensor' if per_tensor else 'per axis (or of unknown granularity)'} "
                f"needs ai.onnx opset >= {needed}, the model imports {opset}"
            )
            messages.append(msg)
            warnings.warn(msg, stacklevel=2)
            continue
        node.domain = ""
        node.op_type = "QuantizeLinear" if ext.quantize else "DequantizeLinear"
        node.overload = ""
        while node.input and node.input[-1] == "":
            node.input.pop()
        if opset < 13:
            # axis exists from opset 13; per-tensor only below.
            kept = [a for a in node.attribute if a.name != "axis"]
            del node.attribute[:]
            node.attribute.extend(kept)
    # Remove fallback functions and imports no node needs any more.
    remaining = {(e.node.domain, e.node.op_type) for e in extended_nodes(out)}
    kept_f = [
        f
        for f in out.functions
        if f.domain not in OP_NAMES or (f.domain, f.name) in remaining
    ]
    del out.functions[:]
    out.functions.extend(kept_f)
    _drop_unused_imports(out, (*OP_NAMES, MS_DOMAIN))
    return out


def _float32_inputs(ext: ExtNode, types: dict[str, TypeInfo]) -> bool:
    """x (for quantize) and the scale are known to be float32."""
    names = [ext.node.input[1]] + ([ext.node.input[0]] if ext.quantize else [])
    return all(n in types and types[n].elem_type == TensorProto.FLOAT for n in names)
