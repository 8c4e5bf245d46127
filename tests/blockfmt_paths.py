"""A block-format node (BFPQuantizeDequantize / MXQuantizeDequantize, or a
legacy name) through one of extql's paths, for the tests by behaviour.

A test of a behaviour is parametrised over :data:`PATHS` and calls
:func:`block_via` (or :func:`refusal_words`) with the path, so that its
body -- the input, the expectation (tests/blockfmt_contract.py or Quark's
stored bits), the comparison -- is written once:

* :data:`NUMPY` -- the NumPy API (``extql.bfp_quantize_dequantize`` /
  ``extql.mx_quantize_dequantize``; a legacy name computes as its family);
* :data:`LIBRARY` -- one node in onnxruntime with extql's custom-op library
  (tests/ortutil.py), at an optimisation level and a thread count;
* :data:`REFERENCE` -- one node in ``onnx.reference.ReferenceEvaluator`` with
  ``extql.reference.OPS``.
* :data:`FALLBACK` -- the node with its fallback function attached
  (``extql.attach_fallbacks``) in onnxruntime without the library, at an
  optimisation level;
* :data:`FALLBACK_REFERENCE` -- that model in ``onnx.reference``;
* :data:`INLINED` -- the node replaced by standard ops
  (``extql.inline_fallbacks``) in onnxruntime without the library.

:func:`fallback_groups` splits cases into models a runtime that ignores
``NodeProto.overload`` runs (one function per operator in each).

:func:`many_node_model` puts many cases into one model (one node each), so
that a grid of cases runs in one session per (level, threads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from blockfmt_contract import OPS, family
from onnx import helper
from ortutil import LEVELS, ONNX_OF, make_model, session, value_info

import extql
from extql.onnx.fallback_blocks import block_variant
from extql.rules.blocks import BFP_OP, MX_OP, check_bfp, check_mx

NUMPY = "numpy"
LIBRARY = "library"
REFERENCE = "reference"
PATHS = (NUMPY, LIBRARY, REFERENCE)
FALLBACK = "fallback"
FALLBACK_REFERENCE = "fallback-reference"
INLINED = "inlined"
#: The paths through the fallback functions (no library).
FALLBACK_PATHS = (FALLBACK, FALLBACK_REFERENCE, INLINED)

#: onnxruntime's optimisation levels by their names in test ids.
LEVEL_IDS = dict(zip(["disabled", "basic", "extended", "all"], LEVELS, strict=True))
#: Every (level, threads) of a library run.
RUNS = [(level, threads) for level in LEVELS for threads in (1, 2)]
#: The name of the node the one-node models give it (in the library's label).
NODE = "node0"

_API = {"bfp": extql.bfp_quantize_dequantize, "mx": extql.mx_quantize_dequantize}


def api(op_type: str):
    """The NumPy API function of an op name (a legacy name: its family's)."""
    return _API[family(op_type)]


def node(op_type: str, attrs: Mapping[str, Any], x: str = "x", y: str = "y",
         name: str = NODE) -> onnx.NodeProto:
    """One node of op_type (in its domain) with the attributes."""
    return helper.make_node(op_type, [x], [y], domain=OPS[op_type][0], name=name, **attrs)


def elem_type(dtype: Any) -> int:
    """The ONNX element type of a NumPy dtype."""
    dtype = np.dtype(dtype)
    return ONNX_OF.get(dtype) or helper.np_dtype_to_tensor_dtype(dtype)


def node_model(op_type: str, x: np.ndarray, attrs: Mapping[str, Any], *,
               declare_output: bool = True, x_shape: bool = True) -> onnx.ModelProto:
    """x (a graph input of x's type, and shape unless not ``x_shape``) ->
    op -> y (declared of x's type and shape unless not ``declare_output``)."""
    x = np.asarray(x)
    out = value_info("y", elem_type(x.dtype) if declare_output else None,
                     x.shape if declare_output else None)
    return make_model([node(op_type, attrs)],
                      [value_info("x", elem_type(x.dtype), x.shape if x_shape else None)],
                      [out], domains=(OPS[op_type][0],))


def many_node_model(cases: Sequence[tuple[str, Mapping[str, Any], np.ndarray]]
                    ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One node per case (op_type, attrs, x): input ``x<i>`` -> output
    ``y<i>``; the model and its feeds."""
    nodes, inputs, outputs, feeds = [], [], [], {}
    for i, (op_type, attrs, x) in enumerate(cases):
        x = np.asarray(x)
        nodes.append(node(op_type, attrs, f"x{i}", f"y{i}", name=f"node{i}"))
        inputs.append(value_info(f"x{i}", elem_type(x.dtype), x.shape))
        outputs.append(value_info(f"y{i}", elem_type(x.dtype), x.shape))
        feeds[f"x{i}"] = x
    domains = sorted({OPS[op][0] for op, _, _ in cases})
    return make_model(nodes, inputs, outputs, domains=domains), feeds


def run_library(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *, level=None,
                threads: int = 0) -> dict[str, np.ndarray]:
    """The model's outputs in onnxruntime with extql's library."""
    sess = session(model, threads=threads, level=level)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds)), strict=True))


def run_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
                  ) -> dict[str, np.ndarray]:
    """The model's outputs in onnx.reference with extql.reference.OPS."""
    from onnx.reference import ReferenceEvaluator

    import extql.reference

    names = [o.name for o in model.graph.output]
    got = ReferenceEvaluator(model, new_ops=extql.reference.OPS).run(names, dict(feeds))
    return dict(zip(names, got, strict=True))


def run_fallback(path: str, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *,
                 level=None, threads: int = 0) -> dict[str, np.ndarray]:
    """The model's outputs through a fallback path: attach_fallbacks and
    onnxruntime without the library (FALLBACK) or onnx.reference
    (FALLBACK_REFERENCE); inline_fallbacks and onnxruntime (INLINED)."""
    if path == INLINED:
        model = extql.inline_fallbacks(model)
        assert not [n for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    else:
        model = extql.attach_fallbacks(model)
    if path == FALLBACK_REFERENCE:
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(model)
        return dict(zip(ref.output_names, ref.run(None, dict(feeds)), strict=True))
    sess = session(model, threads=threads, level=level, register=False)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds)), strict=True))


def fallback_groups(cases: Sequence[dict]) -> list[list[dict]]:
    """Grid cases (dicts with ``op_type`` and ``attrs``) grouped by (operator
    name, fallback variant): one model per group runs in every runtime,
    those that ignore ``NodeProto.overload`` included."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for case in cases:
        fam = family(case["op_type"])
        attrs = (check_bfp if fam == "bfp" else check_mx)(case["attrs"])
        groups.setdefault((case["op_type"], block_variant(fam, attrs)), []).append(case)
    return list(groups.values())


def block_via(path: str, op_type: str, x: Any, attrs: Mapping[str, Any], *, level=None,
              threads: int = 0) -> np.ndarray:
    """The op on x through ``path`` (``level`` and ``threads``: the
    onnxruntime session's)."""
    if path == NUMPY:
        return api(op_type)(x, **attrs)
    x = np.asarray(x)
    if path == REFERENCE:
        return run_reference(node_model(op_type, x, attrs), {"x": x})["y"]
    model = node_model(op_type, x, attrs)
    if path == LIBRARY:
        return run_library(model, {"x": x}, level=level, threads=threads)["y"]
    assert path in FALLBACK_PATHS, path
    return run_fallback(path, model, {"x": x}, level=level, threads=threads)["y"]


def _own_error(exc: BaseException) -> BaseException:
    """The error an implementation raised, out of the TypeErrors that
    onnx.reference wraps it in (``raise TypeError(...) from exc``)."""
    while isinstance(exc, TypeError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def refusal_words(path: str, op_type: str, x: Any, attrs: Mapping[str, Any]) -> str:
    """The words of the refusal of the node on x through ``path``, after the
    operator (and node) it names: the NumPy API's ``TypeError`` /
    ``ValueError`` "<family op>: <words>"; the library's failed status
    "<op_type> (node 'node0'): <words>" when the session is made or run
    (both with and without x's shape in the graph: the same words); the
    reference op's ``TypeError`` / ``ValueError`` "<op_type> node 'node0':
    <words>".  Fails the test when the path does not refuse."""
    if path == NUMPY:
        try:
            api(op_type)(x, **attrs)
        except (TypeError, ValueError) as exc:
            text = str(exc)
        else:
            raise AssertionError(f"{op_type} {attrs}: the NumPy API did not refuse")
        op = BFP_OP if family(op_type) == "bfp" else MX_OP
        prefix = f"{op}: "
    elif path == REFERENCE:
        # Attributes are refused when the evaluator is made, x's type and
        # the axis when it runs: a ValueError / TypeError naming the node.
        x = np.asarray(x)
        try:
            run_reference(node_model(op_type, x, attrs), {"x": x})
        except (TypeError, ValueError) as exc:
            text = str(_own_error(exc))
        else:
            raise AssertionError(f"{op_type} {attrs}: onnx.reference did not refuse")
        prefix = f"{op_type} node '{NODE}': "
    else:
        # With x's shape in the graph the session refuses the node when it
        # is made; without it (its rank unknown until the run) a node whose
        # axis is wrong is refused by the run, with the same words.
        x = np.asarray(x)
        texts = []
        for x_shape in (True, False):
            try:
                run_library(node_model(op_type, x, attrs, x_shape=x_shape), {"x": x})
            except Exception as exc:  # onnxruntime's error types are not importable everywhere
                texts.append(str(exc))
            else:
                raise AssertionError(f"{op_type} {attrs}: the library did not refuse "
                                     f"(x's shape {'given' if x_shape else 'not given'})")
        prefix = f"{op_type} (node '{NODE}'): "
        words = [t.split(prefix, 1)[-1].strip() for t in texts]
        assert words[0] == words[1], words
        text = texts[0]
    assert prefix in text, (prefix, text)
    return text.split(prefix, 1)[1].strip()
