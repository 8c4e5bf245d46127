"""What the figures depend on: CPU, cores, caches, kernel variant, versions, load."""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np


def _cpu_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        fields: dict[str, str] = {}
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip():
                    break  # the first processor is enough
        if "model name" in fields:
            cpu = fields["model name"]
            if "cpu family" in fields and "model" in fields:
                cpu += f" (family {fields['cpu family']}, model {fields['model']})"
    except OSError:
        pass
    return cpu


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in ("sse4_1", "avx2", "fma", "f16c", "avx512f",
                                        "avx512_bf16") if x in have]
    except OSError:
        pass
    return []


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, L3 cache, platform and the versions that matter."""
    from extql import __version__, _kernels

    memory = cache = None
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        memory = f"{kib / (1 << 20):.1f} GiB"
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            cache = f.read().strip()
    except (OSError, ValueError, IndexError):
        pass
    info: dict[str, Any] = {
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "memory": memory,
        "L3 cache": cache,
        "cpu flags": " ".join(_cpu_flags()) or None,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "extql": __version__,
        "kernels": _kernels.isa(),
        "quotient": _kernels.quotient(),
        "openmp": bool(_kernels.have_openmp()),
    }
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        info["onnxruntime"] = None
    return info


def loadavg() -> str:
    """The load average (1/5/15 min), or ``?`` where the OS has none."""
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"
