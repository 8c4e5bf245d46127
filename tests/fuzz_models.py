"""The structure fuzzer's machinery: random Extended-node models, what the
contract says each must do, and a child process that runs them.

A case is a small JSON-able dict (a "spec") drawn by hypothesis
(:func:`specs`): operator and name form (Extended, legacy Vitis, wrong
domain), element types right and wrong, ranks 0..9 with zero-sized
dimensions, per-tensor / per-axis / arbitrary scale and zero-point shapes,
the axis attribute as an int in or out of range or as a float, string,
list or tensor, unknown attributes, missing / extra / empty-named inputs,
each input an initializer or a graph input (declared with exact, symbolic
or no shape), the output declared right, wrong or not at all, one or two
intra-op threads, and a seed for the values (ties, NaN payloads,
subnormals, huge and zero and negative scales ...).

:func:`expectation` says, independently of extql's code (rules from
the operator pages via fuzz_common.contract_error), whether the model must run
("ok": bit-exact against tests/contract.py), must fail with an error
("error": at session creation or at run), or may do either ("either": ONNX
matters the contract does not decide, such as a second output or an opset
version 2 import -- but if it runs, it must be exact).

:class:`Worker` runs cases in a child process (``python fuzz_models.py
--worker``), one JSON line in, a "begin" and an "end" line out per case, so
a crash or a hang is seen and pinned on the case that was running; a case
that outlives its timeout is a hang.  A crashed or hung worker is replaced
by a fresh one for the next case.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_common import (
    DQ,
    QTYPE_NAMES,
    REAL_TYPE_NAMES,
    SPECIAL_SCALES,
    WRONG_TYPE_NAMES,
    Q,
    contract_error,
)

HERE = Path(__file__).resolve().parent

ONNX_CODE = {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13, "bfloat16": 16,
}
NAMES = {
    ("q", "extended"): (Q, "com.amd.quark"),
    ("dq", "extended"): (DQ, "com.amd.quark"),
    ("q", "legacy"): ("VitisQuantizeLinear", "com.vai.quantize"),
    ("dq", "legacy"): ("VitisDequantizeLinear", "com.vai.quantize"),
    ("q", "wrong_domain"): (Q, "com.vai.quantize"),
    ("dq", "wrong_domain"): ("VitisDequantizeLinear", "com.amd.quark"),
}
STRUCTURES = ("normal", "x_empty", "scale_empty", "only_x", "no_inputs", "extra_input")
ATTR_KINDS = ("none", "int", "float", "string", "ints", "floats", "tensor")


# ---------------------------------------------------------------------------
# Specs (hypothesis)
# ---------------------------------------------------------------------------

FAULTS = (
    "x_type", "s_type", "zp_type", "zp_shape", "s_rank2", "s_length", "axis_range",
    "scalar_x_per_axis", "legacy_wrong_domain", "structure", "axis_kind", "out_type",
    "extra_output", "domain_version", "out_shape",
)


def specs():
    """The hypothesis strategy of case specs: a valid model (2 in 5), a valid
    model with one fault injected (2 in 5), or every choice at random."""
    from hypothesis import strategies as st

    any_type = st.sampled_from(("float32",) + QTYPE_NAMES + WRONG_TYPE_NAMES)
    small_shape = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(list)

    @st.composite
    def shape_of(draw) -> list[int]:
        size = draw(st.sampled_from(["small"] * 12 + ["large", "high_rank"]))
        if size == "large":  # above the kernels' parallel minimum (65536)
            return draw(st.sampled_from([[70001], [3, 40000], [2, 3, 20000], [140000, 1]]))
        if size == "high_rank":
            rank = draw(st.integers(6, 9))
            return draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
        rank = draw(st.integers(0, 5))
        return draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank))

    @st.composite
    def valid_spec(draw) -> dict[str, Any]:
        op = draw(st.sampled_from(["q", "dq"]))
        shape = draw(shape_of())
        rank = len(shape)
        per_axis = rank > 0 and draw(st.booleans())
        attr_kind = draw(st.sampled_from(["none", "int", "int"]))
        if per_axis:
            if attr_kind == "none" and rank >= 2:
                axis = 1  # the default
            else:
                attr_kind = "int"
                axis = draw(st.integers(-rank, rank - 1))
            s_shape = [shape[axis]]
        else:  # per tensor: any axis, even out of range, is ignored
            axis = draw(st.integers(-rank - 2, rank + 1))
            s_shape = draw(st.sampled_from([[], [1]]))
        real = st.sampled_from(("float32", "float32") + REAL_TYPE_NAMES)
        x_type = draw(real) if op == "q" else draw(st.sampled_from(QTYPE_NAMES))
        zp_mode = draw(st.sampled_from(["given", "given", "absent", "empty"]))
        zp_type = draw(st.sampled_from(QTYPE_NAMES)) if op == "q" else x_type
        zp_shape = list(s_shape)
        if not per_axis and zp_mode == "given":
            zp_shape = draw(st.sampled_from([[], [1]]))  # either form per tensor
        return {
            "op": op,
            "form": draw(st.sampled_from(["extended", "extended", "legacy"])),
            "domain_version": 1,
            "shape": shape,
            "x_type": x_type,
            "s_type": draw(real),
            "s_shape": s_shape,
            "zp_mode": zp_mode,
            "zp_type": zp_type,
            "zp_shape": zp_shape,
            "axis_kind": attr_kind,
            "axis": axis,
            "extra_attrs": draw(st.lists(
                st.sampled_from(["foo", "saturate", "block_size", "output_dtype", "axes"]),
                max_size=2, unique=True)),
            "structure": "normal",
            "sources": {k: draw(st.sampled_from(["input", "init"])) for k in ("x", "s", "z")},
            "in_shapes": draw(st.sampled_from(["exact", "exact", "symbolic", "none"])),
            "out_type": draw(st.sampled_from(["right", "right", "none"])),
            "out_shape": draw(st.sampled_from(["right", "none", "symbolic"])),
            "extra_output": False,
            "threads": draw(st.sampled_from([1, 2])),
            "style": draw(st.sampled_from(["normal", "ties", "bits", "special", "mixed"])),
            "scale_kind": draw(st.sampled_from(["special", "positive", "bits"])),
            "seed": draw(st.integers(0, 2**32 - 1)),
        }

    def wrong_type(draw, right: str) -> str:
        return draw(any_type.filter(lambda t: t != right))

    def inject(draw, spec: dict, fault: str) -> None:
        rank = len(spec["shape"])
        if fault == "x_type":
            spec["x_type"] = draw(st.sampled_from(
                [t for t in ("float32",) + QTYPE_NAMES + WRONG_TYPE_NAMES
                 if t not in (REAL_TYPE_NAMES if spec["op"] == "q" else QTYPE_NAMES)]))
            if spec["op"] == "dq" and spec["zp_mode"] == "given":
                spec["zp_type"] = spec["x_type"]
        elif fault == "s_type":
            spec["s_type"] = draw(any_type.filter(lambda t: t not in REAL_TYPE_NAMES))
        elif fault == "zp_type":
            spec["zp_mode"] = "given"
            spec["zp_type"] = (wrong_type(draw, spec["x_type"]) if spec["op"] == "dq" else
                               draw(st.sampled_from(("float32",) + WRONG_TYPE_NAMES)))
        elif fault == "zp_shape":
            spec["zp_mode"] = "given"
            spec["zp_shape"] = draw(small_shape.filter(
                lambda z: z != spec["s_shape"] and (len(spec["s_shape"]) == 1 and
                                                    spec["s_shape"][0] != 1 or
                                                    len(z) >= 2 or np.prod(z) != 1)))
        elif fault == "s_rank2":
            spec["s_shape"] = draw(st.sampled_from([[1, 1], [2, 1], [1, 3], [2, 2, 1]]))
            spec["zp_shape"] = list(spec["s_shape"])
        elif fault == "s_length" and rank:
            a = axis_of(spec) % rank if -rank <= axis_of(spec) < rank else 0
            spec["axis_kind"], spec["axis"] = "int", a
            n = draw(st.integers(0, 6).filter(lambda v: v not in (1, spec["shape"][a])))
            spec["s_shape"] = spec["zp_shape"] = [n]
        elif fault == "axis_range" and rank:
            spec["axis_kind"] = "int"
            spec["axis"] = draw(st.sampled_from([rank, rank + 1, -rank - 1, 2**40, -(2**40)]))
            n = draw(st.integers(2, 4))
            spec["s_shape"] = spec["zp_shape"] = [n]
        elif fault in ("scalar_x_per_axis", "s_length", "axis_range"):  # rank 0
            spec["shape"] = []
            n = draw(st.integers(2, 4))
            spec["s_shape"] = spec["zp_shape"] = [n]
        elif fault == "legacy_wrong_domain":
            spec["form"] = "wrong_domain"
        elif fault == "structure":
            spec["structure"] = draw(st.sampled_from(STRUCTURES[1:]))
        elif fault == "axis_kind":
            spec["axis_kind"] = draw(st.sampled_from(ATTR_KINDS[2:]))
        elif fault == "out_type":
            spec["out_type"] = "wrong"
        elif fault == "extra_output":
            spec["extra_output"] = True
        elif fault == "domain_version":
            spec["domain_version"] = 2
        elif fault == "out_shape":
            spec["out_shape"] = "wrong"

    @st.composite
    def spec(draw) -> dict[str, Any]:
        base = draw(valid_spec())
        mode = draw(st.sampled_from(["valid", "valid", "one_fault", "one_fault", "chaos"]))
        if mode == "one_fault":
            fault = draw(st.sampled_from(FAULTS))
            inject(draw, base, fault)
            base["fault"] = fault
        elif mode == "chaos":
            for fault in draw(st.lists(st.sampled_from(FAULTS), min_size=1, max_size=4)):
                inject(draw, base, fault)
            if draw(st.booleans()):
                base["s_shape"] = draw(small_shape)
            if draw(st.booleans()):
                base["zp_type"] = draw(any_type)
            base["fault"] = "chaos"
        else:
            base["fault"] = "none"
        return base

    return spec()


# ---------------------------------------------------------------------------
# What must happen
# ---------------------------------------------------------------------------

def _output_dtype_typed(spec: dict) -> bool:
    """Whether onnxruntime gives a dequantize's y the type of its
    output_dtype (1, float32) rather than the scale's: from
    extql.ort.INFERENCE_ONNXRUNTIME, where x's rank is known when the
    session is made (declared, or x an initializer) and is not 0 (extql's
    inference callback cannot tell a scalar from an unknown rank)."""
    from ortutil import INFERS

    rank_known = (spec["sources"]["x"] == "init" or spec["in_shapes"] != "none") and len(
        spec["shape"]) > 0
    # (the callback leaves a node whose types are wrong as the registrations
    # typed it, for kernel creation to report)
    types_right = (spec["x_type"] in QTYPE_NAMES and spec["s_type"] in REAL_TYPE_NAMES
                   and (spec["zp_mode"] != "given" or spec["zp_type"] == spec["x_type"]))
    return (INFERS and spec["op"] == "dq" and "output_dtype" in spec["extra_attrs"]
            and rank_known and types_right)


def _out_type(spec: dict) -> str:
    """The element type onnxruntime gives y when the inputs are valid."""
    if spec["op"] == "dq":  # the scale's type (float32 where that is wrong)
        if _output_dtype_typed(spec):
            return "float32"
        return spec["s_type"] if spec["s_type"] in REAL_TYPE_NAMES else "float32"
    return spec["zp_type"] if spec["zp_mode"] == "given" else "uint8"


def axis_of(spec: dict) -> int:
    return spec["axis"] if spec["axis_kind"] == "int" else 1


def expectation(spec: dict) -> tuple[str, str]:
    """("ok" | "error" | "either", why)."""
    if spec["form"] == "wrong_domain":
        return "error", "no such operator in that domain"
    if spec["structure"] != "normal":
        return "error", f"inputs: {spec['structure']}"
    if spec["axis_kind"] not in ("none", "int"):
        return "error", f"axis attribute of kind {spec['axis_kind']}"
    op = Q if spec["op"] == "q" else DQ
    given = spec["zp_mode"] == "given"
    if "block_size" in spec["extra_attrs"]:
        # block_size 1: blocked quantization with blocks of one element, so
        # the scale must have x's shape (then, at rank 1, it is also the
        # per-axis scale, and the contract's per-axis output is the answer).
        rank = len(spec["shape"])
        if (rank == 0 or not -rank <= axis_of(spec) < rank
                or list(spec["s_shape"]) != list(spec["shape"])
                or (given and list(spec["zp_shape"]) != list(spec["s_shape"]))):
            return "error", "block_size 1: the scale is not a blocked scale of x"
    err = contract_error(
        op, spec["x_type"], tuple(spec["shape"]), spec["s_type"], tuple(spec["s_shape"]),
        spec["zp_type"] if given else None, tuple(spec["zp_shape"]) if given else None,
        axis_of(spec),
    )
    if err is not None:
        return "error", f"contract: {err[1]}"
    if "output_dtype" in spec["extra_attrs"]:
        # output_dtype 1 (float32): no quantized type; for dequantize the
        # scale's type, or a type onnxruntime gives the output only where
        # it runs extql's inference callback on an x of known rank.
        if spec["op"] == "q" or (spec["s_type"] != "float32"
                                 and not _output_dtype_typed(spec)):
            return "error", "output_dtype float32"
    if spec["out_type"] == "wrong":
        return "error", "declared output type differs"
    if spec["extra_output"]:
        return "either", "a second output"
    if spec["domain_version"] != 1:
        return "either", "domain imported at version 2"
    if spec["out_shape"] == "wrong":
        return "either", "declared output shape differs (onnxruntime may reject it at run)"
    return "ok", "valid"


def _wrong_out_type(spec: dict) -> str:
    right = _out_type(spec)
    return "int8" if right != "int8" else "uint16"


# ---------------------------------------------------------------------------
# Building and running a case (in the worker)
# ---------------------------------------------------------------------------

def _values(spec: dict) -> dict[str, np.ndarray]:
    from fuzz_common import awkward_f32, random_of_type

    rng = np.random.default_rng(spec["seed"])
    s_shape = tuple(spec["s_shape"])
    if spec["s_type"] == "float32":
        n = int(np.prod(s_shape, dtype=np.int64))
        if spec["scale_kind"] == "special":
            s = rng.choice(SPECIAL_SCALES, size=n)
        elif spec["scale_kind"] == "positive":
            s = rng.random(n) * 2 + 1e-3
        else:
            s = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
        s = np.asarray(s, dtype=np.float32).reshape(s_shape)
    else:
        s = random_of_type(rng, spec["s_type"], s_shape)
    base = float(s.reshape(-1)[0]) if s.size and s.dtype == np.float32 else 1.0
    shape = tuple(spec["shape"])
    if spec["x_type"] == "float32":
        x = awkward_f32(rng, shape, base, spec["style"])
    else:
        x = random_of_type(rng, spec["x_type"], shape)
    out = {"x": x, "s": s}
    if spec["zp_mode"] == "given":
        out["z"] = random_of_type(rng, spec["zp_type"], tuple(spec["zp_shape"]))
    return out


def _dtype(name: str) -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _type_name(arr: np.ndarray) -> str:
    return "bfloat16" if arr.dtype.name == "bfloat16" else arr.dtype.name


def widened_output(spec: dict) -> bool:
    """A bfloat16 output on an onnxruntime whose Python API cannot bind it."""
    from extql.ort_io import has_typed_ortvalues

    return (not has_typed_ortvalues() and spec["out_type"] != "wrong"
            and expectation(spec)[0] != "error" and _out_type(spec) == "bfloat16")


def build(spec: dict):
    """(model, feeds, values) for a spec."""
    import onnx
    from onnx import TensorProto, helper
    from ortutil import OPSET, tensor

    from extql.ort_io import has_typed_ortvalues

    values = _values(spec)
    op_name, domain = NAMES[(spec["op"], spec["form"])]

    def declare(name: str, type_name: str | None, shape: tuple[int, ...] | None, how: str):
        if type_name is None:
            return helper.make_value_info(name, onnx.TypeProto())
        if shape is None or how == "none":
            dims = None
        elif how == "symbolic":
            dims = [f"{name}_d{i}" for i in range(len(shape))]
        elif how == "wrong":
            dims = [d + 1 for d in shape] if shape else [2]
        else:
            dims = list(shape)
        return helper.make_tensor_value_info(name, ONNX_CODE[type_name], dims)

    names = {"x": "x", "s": "s", "z": "z"}
    if spec["zp_mode"] == "given":
        node_inputs = ["x", "s", "z"]
    elif spec["zp_mode"] == "empty":
        node_inputs = ["x", "s", ""]
    else:
        node_inputs = ["x", "s"]
    structure = spec["structure"]
    inits = []
    if structure == "x_empty":
        node_inputs[0] = ""
    elif structure == "scale_empty":
        node_inputs[1] = ""
    elif structure == "only_x":
        node_inputs = ["x"]
    elif structure == "no_inputs":
        node_inputs = []
    elif structure == "extra_input":
        node_inputs = node_inputs + [""] * (3 - len(node_inputs)) + ["w"]
        inits.append(tensor("w", np.ones(1, np.float32)))
    used = [n for n in node_inputs if n in names]

    graph_inputs, feeds = [], {}
    for key in used:
        arr = values[key]
        # Without typed OrtValues (onnxruntime < 1.19's Python API) a
        # bfloat16 array cannot be fed: it becomes an initializer.
        if spec["sources"][key] == "init" or (
                _type_name(arr) == "bfloat16" and not has_typed_ortvalues()):
            inits.append(tensor(key, arr))
        else:
            graph_inputs.append(declare(key, _type_name(arr), arr.shape, spec["in_shapes"]))
            feeds[key] = arr

    attrs: dict[str, Any] = {}
    a = spec["axis"]
    kind = spec["axis_kind"]
    if kind == "int":
        attrs["axis"] = a
    elif kind == "float":
        attrs["axis"] = float(a)
    elif kind == "string":
        attrs["axis"] = str(a)
    elif kind == "ints":
        attrs["axis"] = [a]
    elif kind == "floats":
        attrs["axis"] = [float(a)]
    elif kind == "tensor":
        attrs["axis"] = helper.make_tensor("axis", TensorProto.INT64, [], [a])
    for extra in spec["extra_attrs"]:
        attrs[extra] = 1 if extra != "foo" else "bar"

    outputs = ["y", "y2"] if spec["extra_output"] else ["y"]
    nodes = [helper.make_node(op_name, node_inputs, outputs, domain=domain, name="n0", **attrs)]
    out_type = {"right": _out_type(spec), "wrong": _wrong_out_type(spec), "none": None}[
        spec["out_type"]]
    graph_outputs = [declare("y", out_type, tuple(spec["shape"]), spec["out_shape"])]
    if widened_output(spec):
        # ... nor fetched: an exact Cast to float32 carries it out.
        nodes.append(helper.make_node("Cast", ["y"], ["y32"], to=TensorProto.FLOAT))
        graph_outputs[0] = declare("y32", "float32", tuple(spec["shape"]), spec["out_shape"])
    if spec["extra_output"]:
        graph_outputs.append(declare("y2", None, None, "none"))
    graph = helper.make_graph(nodes, "fuzz", graph_inputs, graph_outputs, initializer=inits)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(domain, spec["domain_version"])]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model, feeds, values


def run_case(spec: dict) -> dict[str, Any]:
    """Build and run one case; the outcome as a dict (in the worker)."""
    import onnxruntime as ort
    from contract import assert_same_bits, dequantize, quantize
    from ortutil import NO_ARENA

    import extql
    from extql.ort_io import narrow_bfloat16, ortvalue

    stage = "build"
    try:
        model, feeds, values = build(spec)
        stage = "create"
        so = ort.SessionOptions()
        so.intra_op_num_threads = spec["threads"]
        so.log_severity_level = 4
        so.enable_cpu_mem_arena = not NO_ARENA
        extql.register(so)
        sess = ort.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        stage = "run"
        binding = sess.io_binding()
        alive = []  # the bound OrtValues do not own their memory
        for name, arr in feeds.items():
            alive.append(ortvalue(arr))
            binding.bind_ortvalue_input(name, alive[-1])
        verdict, _ = expectation(spec)
        out = None
        widened = widened_output(spec)
        if verdict != "error" and widened:
            out32 = np.empty(tuple(spec["shape"]), dtype=np.float32)
            alive.append(ortvalue(out32))
            binding.bind_ortvalue_output("y32", alive[-1])
        elif verdict != "error":
            out = np.empty(tuple(spec["shape"]), dtype=_dtype(_out_type(spec)))
            alive.append(ortvalue(out))
            binding.bind_ortvalue_output("y", alive[-1])
        else:
            binding.bind_output("y")
        if spec["extra_output"]:
            binding.bind_output("y2")
        sess.run_with_iobinding(binding)
        if verdict != "error" and widened:  # back to bfloat16, bit for bit
            out = narrow_bfloat16(out32)
    except Exception as exc:  # the error is the result
        return {"stage": stage, "error": type(exc).__name__, "message": str(exc)[:600]}
    result: dict[str, Any] = {"stage": "ok"}
    if out is not None:
        axis = axis_of(spec)
        zp = values.get("z")
        want = (quantize(values["x"], values["s"], zp, axis) if spec["op"] == "q"
                else dequantize(values["x"], values["s"], zp, axis,
                                output_dtype=_dtype(_out_type(spec))))
        try:
            assert_same_bits(out, want, "output")
            result["exact"] = True
        except AssertionError as exc:
            result["exact"] = False
            result["mismatch"] = str(exc)[:600]
    return result


def worker_main() -> None:
    """The child: read specs, one JSON per line; report begin/end for each."""
    import onnxruntime as ort

    from extql import _kernels

    ort.set_default_logger_severity(4)
    print(json.dumps({"event": "ready", "onnxruntime": ort.__version__,
                      "isa": _kernels.isa(), "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        print(json.dumps({"event": "begin", "id": spec.get("id")}), flush=True)
        if "selftest" in spec:  # the harness's own test: a crash or a hang
            if spec["selftest"] == "abort":
                os.abort()
            time.sleep(3600)
        result = run_case(spec)
        result.update(event="end", id=spec.get("id"))
        print(json.dumps(result), flush=True)


# ---------------------------------------------------------------------------
# The parent's handle on a worker
# ---------------------------------------------------------------------------

class WorkerDied(AssertionError):
    """The child crashed or hung while running a case."""


class Worker:
    """A child process running cases; replaced after a crash or a hang."""

    def __init__(self, env: dict[str, str] | None = None, start_timeout: float = 120.0,
                 case_timeout: float = 60.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.start_timeout = start_timeout
        self.case_timeout = case_timeout
        self.proc: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self.started = 0
        self._buf = b""
        self._eof = False
        self._next_id = 0

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "fuzz_models.py"), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            cwd=str(HERE), env=self.env,
        )
        self.started += 1
        self._buf = b""
        self._eof = False
        ready = self._read_event(time.monotonic() + self.start_timeout)
        if ready is None or ready.get("event") != "ready":
            self._fail("the worker did not start", None)
        self.info = ready

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace")[-3000:]
        except (OSError, ValueError):
            return ""

    def _read_event(self, deadline: float) -> dict | None:
        """The next JSON line, or None on end of file or at the deadline."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1:]
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    continue  # stray output from a library
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self._eof = True
                return None
            self._buf += chunk

    def _fail(self, what: str, spec: dict | None) -> None:
        proc = self.proc
        hung = False
        if proc is not None:
            try:  # after the end of its output a dying child exits at once
                proc.wait(timeout=10 if self._eof else 0.01)
            except subprocess.TimeoutExpired:
                hung = True
                proc.kill()
                proc.wait(timeout=30)
        code = None if proc is None else proc.returncode
        self.proc = None
        raise WorkerDied(
            f"{what}: the child {'hung and was killed' if hung else 'died'} "
            f"(exit code {code})\ncase: {json.dumps(spec)}\nstderr:\n{self._stderr_tail()}"
        )

    def run(self, spec: dict) -> dict:
        """Run one case; raise WorkerDied when the child crashes or hangs."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        self._next_id += 1
        spec = dict(spec, id=self._next_id)
        try:
            self.proc.stdin.write((json.dumps(spec) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._fail("writing the case", spec)
        deadline = time.monotonic() + self.case_timeout
        begun = False
        while True:
            event = self._read_event(deadline)
            if event is None:
                self._fail("running the case" if begun else "before the case began", spec)
            assert event is not None
            if event.get("id") != spec["id"]:
                continue
            if event["event"] == "begin":
                begun = True
            elif event["event"] == "end":
                return event

    def close(self) -> None:
        if self.proc is not None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.proc = None


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    sys.path.insert(0, str(HERE))
    worker_main()
