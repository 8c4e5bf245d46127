"""Whole-model benchmark: extql's path against onnxruntime's official Q/DQ.

    python benchmarks/whole_models.py [--quick] [--threads 1 2] [--repeat 15]
        [--models resnet bert] [--variants int8 uint16 ...]
        [--folded [bfp16 mx9 ...]] [--folded-files FILE ...]
        [--json FILE] [--markdown FILE]

Models (benchmarks/model_zoo.py, built from fixed seeds): a ResNet-18-like CNN
on ``[1, 3, 224, 224]`` and a 2-layer BERT-base-like encoder (seq 128, hidden
768).  Variants, each with its anchor:

* ``int8``, ``uint16``, ``int16`` -- onnxruntime's ``quantize_static`` QDQ
  model (per-channel int8 weights, activations of that type) is the
  *official* anchor; the same model with every Q/DQ renamed to the Extended
  operator, passed through :func:`extql.optimize` and run with the library,
  is *extql's path*.  Its outputs must have the official model's bits.
* ``float16``, ``bfloat16`` -- weights stored in the type behind a
  dequantize and a Q/DQ pair (scale 1, zero point 0) on every activation:
  Extended nodes + optimize + library against the same graph with standard
  Cast pairs (the *cast* anchor).
* ``quark-int8``, ``quark-uint16`` -- the official model as Quark writes it
  (com.microsoft Q/DQ, opset 17, IR 8): optimize + library against the
  Quark-form model run by onnxruntime as it is.

Every variant is also compared with the float model.  ``--floor`` adds, for
float16 and bfloat16, the extql model with every Q->DQ pair on an activation
replaced by one onnxruntime ``Abs`` node (timing only: not the pair's values): what any
one-node form of the pair costs in onnxruntime beyond its arithmetic -- the
node boundary, at which onnxruntime's NCHWc layout is reordered and its
Conv + activation / Add fusions stop.  No implementation of the pair as a
node of its own runs faster than that against the float model.

Folded weights (``--folded``, ``--folded-files``): Quark stores the weights
of its BFP16 / MX models as float32 initializers, each behind a block node
(BFPQuantizeDequantize / MXQuantizeDequantize) that quantizes it again on
every run.  The section runs such a model (``model_zoo.block_form`` of the
models above in each configuration named, or Quark-written model files)
with the library registered, with its weights folded offline by
:func:`extql.fold_constants` against as it is; the activations' block nodes
run in both.  Outputs are compared bit for bit in sessions without
onnxruntime's weight prepacking (folded, a MatMul weight is a constant that
onnxruntime packs, and its packed kernel may round the sums differently: the
default sessions' largest difference is in the JSON and the Markdown); a
mismatch there is a failure of the fold (exit status 1).  Each session runs with
``intra_op_num_threads`` = the thread count, sequential execution, default
optimisation level (all), no thread-pool spinning; the sessions of one
variant are timed in interleaved rounds (one run each per round, a different
session first in each round).  The figure is the median over rounds of the
ratio of two sessions' times in the same round (robust to load that changes
between rounds); the ratio of the medians is in the JSON too.  The
machine's load average is recorded: other work on the machine shows in the
absolute times much more than in the ratios.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model_zoo  # noqa: E402

import extql  # noqa: E402
from extql.onnx.graph import QDQ_OPS  # noqa: E402
from extql_bench.config import BLOCK_CONFIGS  # noqa: E402

INT_VARIANTS = ("int8", "uint16", "int16")
FLOAT_VARIANTS = ("float16", "bfloat16")
QUARK_VARIANTS = ("quark-int8", "quark-uint16")
VARIANTS = INT_VARIANTS + FLOAT_VARIANTS + QUARK_VARIANTS
TARGETS = {"official": 1.05, "cast": 1.05, "float": 1.15}


def _session(model: onnx.ModelProto, threads: int, library: bool,
             prepack: bool = True) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not prepack:  # constant weights as they are (the packed kernels may round otherwise)
        so.add_session_config_entry("session.disable_prepacking", "1")
    if library:
        extql.register(so)
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _build(model_name: str, quick: bool) -> onnx.ModelProto:
    if model_name == "resnet":
        return model_zoo.resnet_float(seed=0, size=96 if quick else 224)
    return model_zoo.bert_float(seed=0, seq=32 if quick else 128)


def _variant_models(float_model: onnx.ModelProto, variant: str, cache: dict):
    """(anchor name, anchor model, extql path model, extra facts)."""
    if variant in INT_VARIANTS:
        official = model_zoo.quantize_qdq(float_model, variant)
        cache[variant] = official
        extended = model_zoo.to_extended(official)
        return "official", official, extended
    if variant in FLOAT_VARIANTS:
        cast = model_zoo.float_qdq(float_model, variant, "cast")
        extended = model_zoo.float_qdq(float_model, variant, "extended")
        return "cast", cast, extended
    base = variant.split("-", 1)[1]
    official = cache.get(base) or model_zoo.quantize_qdq(float_model, base)
    quark = model_zoo.quark_form(official)
    return "official", quark, quark


def _pairs_as_abs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each quantize -> dequantize pair (Extended, Vitis or
    com.microsoft: QDQ_OPS) whose quantized tensor feeds only the dequantize
    replaced by one Abs node."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(out.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    uses: dict[str, int] = {}
    for n in nodes:
        for name in n.input:
            uses[name] = uses.get(name, 0) + 1
    graph_outputs = {o.name for o in out.graph.output}
    replaced: dict[int, onnx.NodeProto | None] = {}
    for i, n in enumerate(nodes):
        if QDQ_OPS.get((n.domain, n.op_type)) is not False or n.input[0] not in producer:
            continue
        k = producer[n.input[0]]
        q = nodes[k]
        if (QDQ_OPS.get((q.domain, q.op_type)) is True
                and uses.get(q.output[0]) == 1 and q.output[0] not in graph_outputs):
            replaced[k] = None  # the quantize goes ...
            replaced[i] = onnx.helper.make_node("Abs", [q.input[0]], list(n.output),
                                                name=n.name)  # ... the dequantize is the Abs
    kept = [replaced.get(i, n) for i, n in enumerate(nodes)]
    del out.graph.node[:]
    out.graph.node.extend(n for n in kept if n is not None)
    return out


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(
        np.array_equal(a.view(np.uint8), b.view(np.uint8))
    )


def _same_nodes(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """Whether both graphs have the same nodes and initializers (a field set
    to its default counts as unset)."""
    def key(m: onnx.ModelProto):
        nodes = [(n.op_type, n.domain, tuple(n.input), tuple(n.output),
                  tuple(x.SerializeToString() for x in n.attribute)) for n in m.graph.node]
        return nodes, [i.SerializeToString() for i in m.graph.initializer]

    return key(a) == key(b)


def _paired(times: dict[str, list[float]], a: str, b: str) -> float:
    """The median over rounds of a's time over b's time in the same round."""
    return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))


def _time(sessions: dict[str, ort.InferenceSession], feeds, repeat: int,
          warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(warmup):
        for s in sessions.values():
            s.run(None, feeds)
    order = list(sessions)
    for r in range(repeat):
        # A different session goes first in each round.
        for name in order[r % len(order):] + order[:r % len(order)]:
            t0 = time.perf_counter()
            sessions[name].run(None, feeds)
            times[name].append(time.perf_counter() - t0)
    return times


def run(args: argparse.Namespace) -> list[dict]:
    rows = []
    for model_name in args.models:
        float_model = _build(model_name, args.quick)
        feeds = model_zoo.random_inputs(float_model, seed=123)
        cache: dict = {}
        for variant in args.variants:
            t0 = time.perf_counter()
            anchor_name, anchor, extended = _variant_models(float_model, variant, cache)
            report: list[str] = []
            optimized = extql.optimize(extended, report=report)
            unfused = None
            if args.no_fuse and anchor_name == "official":
                unfused = extql.optimize(extended, fuse=False)
            prep = time.perf_counter() - t0
            for threads in args.threads:
                sessions = {
                    "extql": _session(optimized, threads, True),
                    anchor_name: _session(anchor, threads, False),
                    "float": _session(float_model, threads, False),
                }
                if args.unoptimized:
                    sessions["unoptimized"] = _session(extended, threads, True)
                if unfused is not None:
                    sessions["no_fuse"] = _session(unfused, threads, True)
                if args.control:
                    sessions["control"] = _session(anchor, threads, False)
                floor = (_pairs_as_abs(optimized) if args.floor and variant in FLOAT_VARIANTS
                         else None)
                if floor is not None:
                    sessions["floor"] = _session(floor, threads, True)
                outs = {k: s.run(None, feeds) for k, s in sessions.items() if k != "floor"}
                pairs = list(zip(outs["extql"], outs[anchor_name], strict=True))
                exact = all(_bits_equal(a, b) for a, b in pairs)
                if "no_fuse" in outs:
                    nf_pairs = list(zip(outs["no_fuse"], outs[anchor_name], strict=True))
                max_diff = max(
                    float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                    for a, b in pairs
                )
                times = _time(sessions, feeds, args.repeat, args.warmup)
                med = {k: statistics.median(v) for k, v in times.items()}
                paired = functools.partial(_paired, times)

                row = {
                    "model": model_name, "variant": variant, "threads": threads,
                    "anchor": anchor_name,
                    "ms": {k: round(v * 1e3, 3) for k, v in med.items()},
                    "ratio_anchor": paired("extql", anchor_name),
                    "ratio_float": paired("extql", "float"),
                    "anchor_vs_float": paired(anchor_name, "float"),
                    "ratio_of_medians_anchor": med["extql"] / med[anchor_name],
                    "ratio_of_medians_float": med["extql"] / med["float"],
                    "exact_bits": exact, "max_abs_diff": max_diff,
                    "same_nodes_as_anchor": _same_nodes(optimized, anchor),
                    "control_ratio": paired("control", anchor_name) if args.control else None,
                    "floor_vs_float": paired("floor", "float") if floor is not None else None,
                    "floor_nodes_left": _quant_nodes(floor) if floor is not None else None,
                    "no_fuse_ratio_anchor": paired("no_fuse", anchor_name)
                    if "no_fuse" in times else None,
                    "no_fuse_max_abs_diff": max(
                        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                        for a, b in nf_pairs) if "no_fuse" in outs else None,
                    "mb": {"extql": round(optimized.ByteSize() / 1e6, 2),
                           "unoptimized": round(extended.ByteSize() / 1e6, 2)},
                    "nodes_left": _quant_nodes(optimized),
                    "prepare_s": round(prep, 1),
                }
                rows.append(row)
                _print_row(row)
            if args.verbose:
                for line in report:
                    print("   ", line)
    return rows


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
               for x, y in zip(a, b, strict=True))


def _block_models(args: argparse.Namespace) -> list[tuple[str, str, onnx.ModelProto]]:
    """(model, form, model as Quark writes it) of the folded-weights section:
    each model of --models in each configuration of --folded, then each file
    of --folded-files."""
    out = []
    for model_name in args.models if args.folded else ():
        float_model = _build(model_name, args.quick)
        for name in args.folded:
            op, attrs = BLOCK_CONFIGS[name]
            out.append((model_name, name, model_zoo.block_form(float_model, op, attrs)))
    for path in args.folded_files or ():
        out.append((os.path.basename(path), "file", onnx.load(path)))
    return out


def run_folded(args: argparse.Namespace) -> list[dict]:
    """The folded-weights section (see the module docstring): one row per
    model, form and thread count."""
    rows = []
    for model_name, form, unfolded in _block_models(args):
        feeds = model_zoo.random_inputs(unfolded, seed=123)
        folded = extql.fold_constants(unfolded)
        for threads in args.threads:
            plain = [_session(m, threads, True, prepack=False).run(None, feeds)
                     for m in (folded, unfolded)]
            sessions = {"folded": _session(folded, threads, True),
                        "unfolded": _session(unfolded, threads, True)}
            outs = {k: s.run(None, feeds) for k, s in sessions.items()}
            times = _time(sessions, feeds, args.repeat, args.warmup)
            med = {k: statistics.median(v) for k, v in times.items()}
            row = {
                "model": model_name, "form": form, "threads": threads,
                "ms": {k: round(v * 1e3, 3) for k, v in med.items()},
                "ratio": _paired(times, "folded", "unfolded"),
                "ratio_of_medians": med["folded"] / med["unfolded"],
                "exact_bits": all(_bits_equal(a, b) for a, b in zip(*plain, strict=True)),
                "max_abs_diff": _max_diff(outs["folded"], outs["unfolded"]),
                "block_nodes": {"unfolded": _block_count(unfolded),
                                "folded": _block_count(folded)},
            }
            rows.append(row)
            _print_folded_row(row)
    return rows


def _block_count(model: onnx.ModelProto) -> int:
    return sum(n.op_type in ("BFPQuantizeDequantize", "MXQuantizeDequantize")
               for n in model.graph.node)


def _print_folded_row(row: dict) -> None:
    ms = row["ms"]
    print(f"{row['model']:<7} {row['form']:<13} t={row['threads']}  "
          f"folded {ms['folded']:8.2f} ms  unfolded {ms['unfolded']:8.2f} ms  "
          f"xunfolded {row['ratio']:.3f}  block nodes {row['block_nodes']['unfolded']} -> "
          f"{row['block_nodes']['folded']}  bits {'exact' if row['exact_bits'] else 'DIFFER'}"
          f" (default sessions: max diff {row['max_abs_diff']:.3g})", flush=True)


def _quant_nodes(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        if "Quantize" in node.op_type:
            key = f"{node.domain or 'ai.onnx'}:{node.op_type}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def _meets(row: dict) -> bool:
    ok = row["ratio_anchor"] <= TARGETS[row["anchor"]]
    if row["anchor"] == "cast":
        ok = ok and row["ratio_float"] <= TARGETS["float"]
    else:
        ok = ok and row["exact_bits"]
    return ok


def _print_row(row: dict) -> None:
    ms = row["ms"]
    print(
        f"{row['model']:<7} {row['variant']:<13} t={row['threads']}  "
        f"extql {ms['extql']:8.2f} ms  {row['anchor']} {ms[row['anchor']]:8.2f} ms  "
        f"float {ms['float']:8.2f} ms  x{row['anchor']} {row['ratio_anchor']:.3f}  "
        f"xfloat {row['ratio_float']:.3f}  bits {'exact' if row['exact_bits'] else 'DIFFER'}"
        f"  {'ok' if _meets(row) else 'MISSED'}"
        + (f"  unoptimized {ms['unoptimized']:.2f} ms" if "unoptimized" in ms else "")
        + (f"  no-fuse x{row['anchor']} {row['no_fuse_ratio_anchor']:.3f}"
           if row.get("no_fuse_ratio_anchor") else "")
        + (f"  control {row['control_ratio']:.3f}" if row.get("control_ratio") else "")
        + (f"  floor xfloat {row['floor_vs_float']:.3f}" if row.get("floor_vs_float") else ""),
        flush=True,
    )


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _folded_markdown(rows: list[dict]) -> list[str]:
    """The folded-weights section's table (none without rows)."""
    if not rows:
        return []
    lines = [
        "",
        "Folded weights (Quark's block formats, library registered): the model with its "
        "weights folded by `extql.fold_constants` against as Quark writes it; output bits "
        "compared without weight prepacking, the largest difference of the default sessions "
        "beside them.",
        "",
        "| model | form | threads | folded ms | unfolded ms | folded / unfolded | "
        "block nodes | output bits | default sessions' max diff |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ms, nodes = r["ms"], r["block_nodes"]
        lines.append(
            f"| {r['model']} | {r['form']} | {r['threads']} | {ms['folded']:.2f} | "
            f"{ms['unfolded']:.2f} | {r['ratio']:.3f} | {nodes['unfolded']} -> "
            f"{nodes['folded']} | {'exact' if r['exact_bits'] else 'DIFFER'} | "
            f"{r['max_abs_diff']:.3g} |")
    return lines


def _markdown(rows: list[dict], argv: list[str], folded: list[dict]) -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0, 0, 0)
    lines = [
        f"Command: `python benchmarks/whole_models.py {' '.join(argv)}`  ",
        f"Machine: {_cpu_name()}, {os.cpu_count()} cores, {platform.system()}; "
        f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, extql {extql.__version__}; "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}",
        "",
        "| model | variant | threads | extql ms | anchor | anchor ms | float ms | "
        "extql / anchor | extql / float | output bits | target | same nodes | "
        "control / anchor | unoptimized / extql | no-fuse / anchor | floor / float |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ms = r["ms"]
        bits = "exact" if r["exact_bits"] else f"differ (max {r['max_abs_diff']:.3g})"
        lines.append(
            f"| {r['model']} | {r['variant']} | {r['threads']} | {ms['extql']:.2f} | "
            f"{r['anchor']} | {ms[r['anchor']]:.2f} | {ms['float']:.2f} | "
            f"{r['ratio_anchor']:.3f} | {r['ratio_float']:.3f} | {bits} | "
            f"{'met' if _meets(r) else 'missed'} | "
            f"{'yes' if r['same_nodes_as_anchor'] else 'no'} | "
            + (f"{r['control_ratio']:.3f} | " if r.get("control_ratio") else " | ")
            + (f"{ms['unoptimized'] / ms['extql']:.2f} |" if "unoptimized" in ms else "|")
            + (f" {r['no_fuse_ratio_anchor']:.3f} |" if r.get("no_fuse_ratio_anchor") else " |")
            + (f" {r['floor_vs_float']:.3f} |" if r.get("floor_vs_float") else " |")
        )
    return "\n".join((lines if rows else lines[:2]) + _folded_markdown(folded)) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="small inputs (ResNet 96x96, BERT seq 32), 1 thread, 5 rounds")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="thread counts (default 1 and 2; --quick: 1)")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds (default 15)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    p.add_argument("--models", nargs="+", default=["resnet", "bert"],
                   choices=["resnet", "bert"])
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS,
                   help="the variants (default all; none: only the folded-weights section)")
    p.add_argument("--folded", nargs="*", choices=list(BLOCK_CONFIGS), metavar="CONFIG",
                   help="also the folded-weights section: the models in Quark's block "
                        "formats, weights folded by extql.fold_constants against unfolded "
                        f"({', '.join(BLOCK_CONFIGS)}; no name: all)")
    p.add_argument("--folded-files", nargs="+", metavar="FILE",
                   help="also Quark-written block-format models (static input shapes) in "
                        "the folded-weights section, e.g. tests/data/quark/cnn_bfp16.onnx")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the table as Markdown")
    p.add_argument("--control", action="store_true",
                   help="also time a second session of the anchor model: its ratio to the "
                        "anchor shows the noise of the measurement")
    p.add_argument("--no-fuse", action="store_true",
                   help="also time optimize(fuse=False) for the int and Quark variants")
    p.add_argument("--unoptimized", action="store_true",
                   help="also time the Extended model as it is (no optimize) with the library")
    p.add_argument("--floor", action="store_true",
                   help="float16 / bfloat16: also time the extql model with each Q->DQ pair "
                        "replaced by one Abs node: the cost of the node boundary alone, "
                        "against the float model")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print optimize's report of the nodes it left")
    args = p.parse_args(argv)
    if args.threads is None:
        args.threads = [1] if args.quick else [1, 2]
    if args.repeat is None:
        args.repeat = 5 if args.quick else 15
    ort.set_default_logger_severity(3)
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advice
    if args.folded == []:
        args.folded = list(BLOCK_CONFIGS)
    rows = run(args)
    folded = run_folded(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": argv, "onnxruntime": ort.__version__, "rows": rows,
                       "folded": folded}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(_markdown(rows, argv, folded))
    missed = [r for r in rows if not _meets(r)]
    if rows:
        print(f"{len(rows) - len(missed)}/{len(rows)} rows meet their targets")
    return 1 if any(not r["exact_bits"] for r in folded) else 0


if __name__ == "__main__":
    sys.exit(main())
