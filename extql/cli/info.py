"""``extql info``: what a bug report needs (versions, OpenMP, threads, library)."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys

from .. import __version__
from . import json_output

__all__ = ["register"]


def _cmd_info(args: argparse.Namespace) -> int:
    """Print one row per fact: versions, kernels, cores, threads, library."""
    from .. import _kernels, ort
    from ..api import linear as numpy_api

    rows = [
        ("extql", __version__),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", f"{platform.system()} {platform.machine()}"),
        ("numpy", importlib.import_module("numpy").__version__),
        ("openmp", "yes" if _kernels.have_openmp() else "no (kernels run serially)"),
        ("kernels", f"{_kernels.isa()} (available: {', '.join(_kernels.available_isas())}; "
                    "EXTQL_ISA=baseline forces the baseline)"),
        ("quotient", f"{_kernels.quotient()} (how the quantize divides; "
                     "EXTQL_QUOTIENT=division|fma forces one)"),
        ("cores", str(_kernels.cores())),
        ("threads", f"{numpy_api.get_num_threads()} (EXTQL_NUM_THREADS="
                    f"{os.environ.get('EXTQL_NUM_THREADS', 'unset')})"),
    ]
    rows += ort.info_rows()
    json_output.record(args, info=dict(rows))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``info`` to the ``extql`` command."""
    p = subparsers.add_parser("info",
                              help="print versions, OpenMP, thread count and library path")
    json_output.add_json_flag(p)
    p.set_defaults(func=_cmd_info)
