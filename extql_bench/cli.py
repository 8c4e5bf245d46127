"""The command line of the harness: ``extql bench`` and ``python -m extql_bench``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from extql.cli.args import thread_count
from extql.cli.errors import CliError, writable_output
from extql.rules.types import QTYPES, QUANTIZED, SUBBYTE

from .config import (
    BLOCK_CONFIGS,
    BLOCK_LAYOUTS,
    DQ,
    FLOATS,
    GRANULARITIES,
    TABLES,
    BenchConfig,
    Q,
    parse_size,
    size_label,
)
from .copy_library import BuildError
from .dpu import DPU_SHAPES
from .machine import loadavg, machine_info
from .report import format_markdown, format_report
from .runner import Result, run, type_label

DESCRIPTION = (
    "Median time ratios extql / anchor, measured side by side and interleaved on the "
    "same tensors: the native op in onnxruntime against onnxruntime's "
    "QuantizeLinear/DequantizeLinear, its Cast (float16/bfloat16) and a copy kernel "
    "moving the same bytes (ort table); the NumPy API against the NumPy expression "
    "(numpy); the native op against the fallback model (fallback); Quark's block "
    "formats in onnxruntime against their fallback model inlined to standard ops "
    "and the copy kernel (blocks); Quark's DPU-emulation ops (ExtendedInstanceNormalization, "
    "ExtendedLSTM) in onnxruntime and through the NumPy API against onnxruntime's float "
    "InstanceNormalization / LSTM (dpu).  Below 1, extql is faster.  The method: "
    "benchmarks/README.md."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", nargs="+", type=parse_size, metavar="N",
                   help="tensor sizes in elements (64K, 256K, 1M, 16M, or numbers; "
                        "default: 64K 256K 1M 16M)")
    p.add_argument("--threads", nargs="+", type=thread_count, metavar="T",
                   help="session / kernel thread counts; 0 = all cores (default: 1 0)")
    p.add_argument("--repeat", type=int, metavar="R",
                   help="interleaved samples per contender; the median is reported (default 15)")
    p.add_argument("--ops", nargs="+", choices=[Q, DQ, "q", "dq"], metavar="OP",
                   help="Q and/or DQ (default both)")
    p.add_argument("--types", nargs="+", choices=list(QUANTIZED), metavar="TYPE",
                   help=f"quantized types (default the eight: {', '.join(QTYPES)}; also "
                        f"{', '.join(SUBBYTE)}, packed in the onnxruntime table)")
    p.add_argument("--granularity", nargs="+", choices=GRANULARITIES, dest="granularities",
                   metavar="G", help=f"{', '.join(GRANULARITIES)} (default all)")
    p.add_argument("--float", nargs="+", choices=FLOATS, dest="floats", metavar="FLOAT",
                   help="the float side of the onnxruntime table's rows: quantize's x and "
                        "scale, dequantize's scale and output (default: float32)")
    p.add_argument("--tables", nargs="+", choices=TABLES, metavar="TABLE",
                   help=f"{', '.join(TABLES)} (default all)")
    p.add_argument("--blocks", nargs="+", choices=list(BLOCK_CONFIGS), metavar="CONFIG",
                   help=f"the blocks table's configurations ({', '.join(BLOCK_CONFIGS)}; "
                        "default all)")
    p.add_argument("--block-layout", nargs="+", choices=list(BLOCK_LAYOUTS),
                   dest="block_layouts", metavar="L",
                   help="the blocks table's layouts: nchw (an NCHW activation, blocks along "
                        "axis 1), axis1 (a (n/256, 256) MatMul input, blocks along the last "
                        "axis); default both")
    p.add_argument("--dpu", nargs="+", choices=list(DPU_SHAPES), metavar="SHAPE",
                   help=f"the dpu table's shapes ({', '.join(DPU_SHAPES)}; default all: the "
                        "instance norm's x and the LSTM's sequence x batch at Quark's size)")
    p.add_argument("--isa",
                   help="force a kernel variant (baseline, avx2, avx512); default: automatic")
    p.add_argument("--no-check", action="store_true", help="skip the exactness check")
    p.add_argument("--spin", action="store_true",
                   help="keep onnxruntime's thread-pool spinning (default: off, because the "
                        "idle workers of one session would spin on the cores the next "
                        "interleaved session needs)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 64K elements, 1 thread, 3 repeats, per tensor")
    p.add_argument("--json", metavar="FILE",
                   help="also write the results as JSON to FILE ('-': standard output, "
                        "instead of the table)")
    p.add_argument("--markdown", metavar="FILE",
                   help="also write a standalone Markdown report (command, machine, method, "
                        "targets, tables) to FILE")
    p.add_argument("--details", action="store_true",
                   help="also print the times of every measurement (ms)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    cfg = BenchConfig()
    if args.quick:
        cfg.sizes, cfg.threads, cfg.repeat, cfg.side_repeat = (1 << 16,), (1,), 3, 3
        cfg.granularities, cfg.min_sample = ("tensor",), 5e-4
        cfg.blocks = ("bfp16", "mxfp4")
        cfg.dpu = ("in-1x64x56x56", "lstm-80x1")
    if args.sizes:
        cfg.sizes = tuple(args.sizes)
    if args.threads:
        cfg.threads = tuple(args.threads)
    if args.repeat:
        cfg.repeat = cfg.side_repeat = max(1, args.repeat)
    if args.ops:
        cfg.ops = tuple(dict.fromkeys(o.upper() for o in args.ops))
    if args.types:
        cfg.types = tuple(args.types)
    if args.granularities:
        cfg.granularities = cfg.side_granularities = tuple(args.granularities)
    if args.floats:
        cfg.floats = tuple(dict.fromkeys(args.floats))
    if args.tables:
        cfg.tables = tuple(args.tables)
    if args.blocks:
        cfg.blocks = tuple(dict.fromkeys(args.blocks))
    if args.block_layouts:
        cfg.block_layouts = tuple(dict.fromkeys(args.block_layouts))
    if args.dpu:
        cfg.dpu = tuple(dict.fromkeys(args.dpu))
    cfg.check = not args.no_check
    cfg.spin = args.spin
    if not args.quiet:
        cfg.progress = lambda line: print(line, file=sys.stderr, flush=True)
    return cfg


def argv_of(args: argparse.Namespace) -> list[str]:
    """The options a run was given, as a command line (for the reports)."""
    out: list[str] = []
    for name, flag in (("sizes", "--sizes"), ("threads", "--threads"), ("repeat", "--repeat"),
                       ("ops", "--ops"), ("types", "--types"),
                       ("granularities", "--granularity"), ("floats", "--float"),
                       ("tables", "--tables"), ("blocks", "--blocks"),
                       ("block_layouts", "--block-layout"), ("dpu", "--dpu"),
                       ("isa", "--isa")):
        value = getattr(args, name, None)
        if value is None or value == []:
            continue
        if isinstance(value, (list, tuple)):
            out += [flag] + [size_label(v) if name == "sizes" else str(v) for v in value]
        else:
            out += [flag, str(value)]
    for name, flag in (("quick", "--quick"), ("spin", "--spin"), ("no_check", "--no-check")):
        if getattr(args, name, False):
            out.append(flag)
    return out


def status(results: Sequence[Result]) -> int:
    """1 when an output was not exact (a bug, whatever the speed)."""
    bad = [r for r in results if r.exact and r.exact.startswith("MISMATCH")]
    for r in bad:
        print(f"extql bench: {r.op} {type_label(r)} {r.granularity} {size_label(r.size)}: "
              f"{r.exact}", file=sys.stderr)
    return 1 if bad else 0


def command(args: argparse.Namespace) -> int:
    """Run the benchmark the parsed options describe; print and write the reports."""
    from extql import _kernels

    cfg = config_from_args(args)
    try:
        for report in (args.json, args.markdown):  # before the work, not after it
            if report and report != "-":
                writable_output(report, "report")
    except CliError as exc:
        print(f"extql bench: {exc}", file=sys.stderr)
        return 2
    load_start = loadavg()
    if args.isa:
        try:
            _kernels.set_isa(args.isa)
        except ValueError as exc:
            print(f"extql bench: {exc}", file=sys.stderr)
            return 2
    try:
        results = run(cfg)
    except BuildError as exc:
        print(f"extql bench: the copy anchor: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.isa:
            _kernels.set_isa(None)
    info = machine_info()
    # Other work on the machine shows in the figures (a 2-thread run needs
    # both cores): say how busy it was.
    info["load average (1/5/15 min)"] = f"{load_start} at the start, {loadavg()} at the end"
    if args.isa:
        info["kernels"] = args.isa
    command_line = "extql bench" + "".join(" " + a for a in argv_of(args))
    if args.json:
        doc = {
            "machine": info,
            "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "progress"},
            "command": command_line,
            "results": [r.as_dict() for r in results],
        }
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
            return status(results)
        with open(args.json, "w") as f:
            f.write(text + "\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(format_markdown(results, cfg, info, command_line))
    print(format_report(results, cfg, info, details=args.details))
    return status(results)


def main(argv: Sequence[str] | None = None, prog: str = "extql bench") -> int:
    """Parse argv (default: sys.argv[1:]) and run; the exit status (0, 1 for
    an inexact output, 2 for bad options or a copy anchor that cannot be built)."""
    # A short usage line: a bad option is the usage and one error line, as for
    # every other extql command (the options are in --help).
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION,
                                usage=f"{prog} [OPTIONS] ({prog} --help lists them)")
    add_arguments(p)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad option (2)
        return int(exc.code or 0)
    return command(args)
