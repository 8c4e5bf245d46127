"""Independent figures for the tests of ``extql analyze``, from the tensors
themselves: the test exposes them as graph outputs, runs onnxruntime
(graph optimisations off, extql's library registered for the Extended
nodes) and computes SQNR, the largest error, the clipped share and cosine
with NumPy, as the contract defines them.  Nothing here calls extql's
analysis code; the quantization points are found by the names Quark gives
them (``<t>_QuantizeLinear`` / ``<t>_DequantizeLinear``, ``<w>_quantized``).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from contract import ALL_TYPES

import extql
from extql import ort_io


def run_exposed(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
                names: list[str]) -> list[dict[str, np.ndarray]]:
    """Per sample, the values of ``names`` (graph inputs, initializers and
    node outputs alike) and of the graph outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    present = {o.name for o in m.graph.output}
    inputs = {i.name for i in m.graph.input}
    for n in names:
        if n not in present and n not in inits and n not in inputs:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
            present.add(n)
    so = extql.register(ort.SessionOptions())
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    result = []
    for f in feeds:
        # Through an I/O binding: onnxruntime's run() cannot hand over bfloat16.
        binding = sess.io_binding()
        alive = ort_io.bind_inputs(binding, f)
        for n in out_names:
            binding.bind_output(n, "cpu")
        sess.run_with_iobinding(binding)
        del alive
        values = {n: ort_io.to_numpy(v)
                  for n, v in zip(out_names, binding.get_outputs(), strict=True)}
        values.update(f)
        values.update({n: inits[n] for n in names if n in inits})
        result.append(values)
    return result


def sqnr(refs: list[np.ndarray], tests: list[np.ndarray]) -> float:
    """10 log10(sum ref^2 / sum (ref - test)^2) over all the samples pooled."""
    r = np.concatenate([np.asarray(a, np.float64).ravel() for a in refs])
    t = np.concatenate([np.asarray(a, np.float64).ravel() for a in tests])
    noise = np.sum((r - t) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(r**2) / noise))


def max_error(refs, tests) -> float:
    return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(refs, tests, strict=True))


def cosine(refs, tests) -> float:
    a = np.concatenate([np.asarray(x, np.float64).ravel() for x in refs])
    b = np.concatenate([np.asarray(x, np.float64).ravel() for x in tests])
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def _clipped(q: np.ndarray) -> float:
    for dtype, lo, hi in ALL_TYPES.values():
        if q.dtype == dtype:
            if dtype.kind in "iu" or "int" in dtype.name:
                v = q.astype(np.int64)
                return float(np.mean((v == lo) | (v == hi)))
            return float(np.mean(np.abs(q.astype(np.float32)) >= np.float32(hi)))
    raise AssertionError(f"not a quantized type: {q.dtype}")


def quark_point(quant: onnx.ModelProto, node_name: str) -> dict[str, str | None]:
    """The tensors of the point whose dequantize (or BFP / MX) node is
    ``node_name``, found by Quark's names: input (None for a stored weight),
    quantized values, output."""
    nodes = {n.name: n for n in quant.graph.node}
    dq = nodes[node_name]
    if dq.op_type in ("BFPQuantizeDequantize", "MXQuantizeDequantize", "BFPFixNeuron",
                      "MXFixNeuron"):
        return {"input": dq.input[0], "quantized": None, "output": dq.output[0]}
    q = nodes.get(node_name.replace("_DequantizeLinear", "_QuantizeLinear"))
    if q is not None and q.output[0] == dq.input[0]:
        return {"input": q.input[0], "quantized": q.output[0], "output": dq.output[0]}
    return {"input": None, "quantized": dq.input[0], "output": dq.output[0]}


def expected_point(float_model: onnx.ModelProto, quant: onnx.ModelProto,
                   feeds: list[dict[str, np.ndarray]], point: dict) -> dict[str, float | None]:
    """The figures of a point of a report (its JSON form), recomputed: local
    SQNR, largest error and clipped share from the point's own tensors,
    accumulated SQNR from FLOAT's tensor of the point's name against QUANT's
    value of that name (the point's output where QUANT has none)."""
    t = quark_point(quant, point["node"])
    name = point["tensor"]
    quant_values = {i.name for i in quant.graph.input} | {i.name for i in quant.graph.initializer}
    quant_values |= {o for n in quant.graph.node for o in n.output}
    float_values = {i.name for i in float_model.graph.input}
    float_values |= {i.name for i in float_model.graph.initializer}
    float_values |= {o for n in float_model.graph.node for o in n.output}
    matched = name in float_values
    counterpart = name if name in quant_values else t["output"]
    qnames = [n for n in (t["input"], t["quantized"], t["output"], counterpart) if n]
    qv = run_exposed(quant, feeds, qnames)
    fv = run_exposed(float_model, feeds, [name] if matched else [])
    if t["input"] is not None:
        ref = [v[t["input"]] for v in qv]
    else:
        ref = [v[name] for v in fv]
    out = [v[t["output"]] for v in qv]
    expected = {"local_sqnr_db": sqnr(ref, out), "max_abs_error": max_error(ref, out),
                "accumulated_sqnr_db": sqnr([v[name] for v in fv], [v[counterpart] for v in qv])
                if matched else None}
    if t["quantized"] is not None:
        expected["clipped_fraction"] = float(np.mean([_clipped(v[t["quantized"]]) for v in qv]))
    return expected


def model_sqnr(float_model: onnx.ModelProto, quant: onnx.ModelProto,
               feeds: list[dict[str, np.ndarray]]) -> float:
    """SQNR of QUANT's outputs against FLOAT's, all outputs and samples pooled."""
    outs = [o.name for o in float_model.graph.output]
    fv = run_exposed(float_model, feeds, [])
    qv = run_exposed(quant, feeds, [])
    return sqnr([v[o] for v in fv for o in outs], [v[o] for v in qv for o in outs])


def assert_db(actual: float | None, expected: float | None, what: str, tol: float = 0.01) -> None:
    """Two dB figures agree within ``tol`` (None / inf on both sides agree)."""
    if expected is None or expected == float("inf"):
        assert actual is None, f"{what}: {actual} != {expected}"
        return
    assert actual is not None and abs(actual - expected) <= tol, f"{what}: {actual} != {expected}"
