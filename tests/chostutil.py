"""A C host program for extql's onnxruntime library, for the tests that run
the library the way a C user does: tests/chost/host.c, compiled with the
system C compiler against onnxruntime's C API as tests/chost/ort_host.h
declares it, linked with the ``libonnxruntime.so.1.*`` that the onnxruntime
wheel carries in ``onnxruntime/capi/``, and run as a process of its own with
no Python in it.

* :func:`unavailable` says why the host cannot be built here (None when it
  can): not Linux, no C compiler, or an onnxruntime wheel without the shared
  library (1.18.1 has none; 1.19.2, 1.20, 1.24 and 1.32 have one);
* :func:`build` compiles it; :meth:`Host.run` runs models through it,
  each a :class:`Job` (arrays in, arrays out, one session per ``(level,
  threads)``), all in one process;
* :func:`run_python` runs the same model the Python way (onnxruntime with
  ``extql.register``), for the bits the host must reproduce.

Arrays cross as raw bytes in ONNX's layout: the packed types (int4, uint4,
float4e2m1) packed by extql.ort_io, bfloat16 and float8 as their bytes.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from ortutil import DTYPE_OF, LEVELS, ONNX_OF, session, tensor

from extql import ort_io

SOURCES = Path(__file__).resolve().parent / "chost"
#: onnxruntime's graph optimisation levels as the C API numbers them, lowest
#: first (the order of ortutil.LEVELS).
LEVEL_NUMBERS = (0, 1, 2, 99)
_LEVEL = dict(zip(LEVEL_NUMBERS, LEVELS, strict=True))


def onnxruntime_library() -> Path | None:
    """The ``libonnxruntime.so.1.*`` of the installed onnxruntime
    package, or None when the wheel has none."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        return None
    found = sorted((Path(spec.origin).parent / "capi").glob("libonnxruntime.so.1*"))
    return found[0] if found else None


def compiler() -> list[str] | None:
    """The C compiler's command: $CC (with its flags), else cc, gcc or
    clang on the PATH; None when there is none."""
    commands = [shlex.split(os.environ["CC"])] if os.environ.get("CC", "").strip() \
        else [["cc"], ["gcc"], ["clang"]]
    for command in commands:
        path = shutil.which(command[0])
        if path:
            return [path, *command[1:]]
    return None


def unavailable() -> str | None:
    """Why the C host cannot be built and run here, or None."""
    if not sys.platform.startswith("linux"):
        return f"the C host is built for Linux only (this is {sys.platform})"
    if compiler() is None:
        return "no C compiler ($CC, cc, gcc or clang) on the PATH"
    if onnxruntime_library() is None:
        return (f"the onnxruntime {ort.__version__} wheel ships no libonnxruntime.so.1.* in "
                "onnxruntime/capi/ (its C API lives only inside the Python module)")
    return None


@dataclass
class Job:
    """One model for the host: its sessions (one per ``(level, threads)`` of
    ``runs``, onnxruntime's level numbers) all run with ``feeds``."""

    model: onnx.ModelProto | Path
    feeds: Mapping[str, np.ndarray]
    runs: Sequence[tuple[int, int]]


@dataclass
class HostResult:
    """What one host process did."""

    returncode: int
    stdout: str
    stderr: str
    #: Per job, per run (in the order asked): output name -> array.
    outputs: list[list[dict[str, np.ndarray]]] = field(default_factory=list)
    #: The jobs that failed, and their exit status.
    failed: dict[int, int] = field(default_factory=dict)
    #: Every file mapped into the process after its first run.
    mapped: list[str] = field(default_factory=list)
    #: The onnxruntime version the process ran.
    version: str = ""


def host_environment(isa: str | None = None) -> dict[str, str]:
    """A clean environment for the host: PATH and HOME only (no PYTHON*, no
    LD_PRELOAD or LD_LIBRARY_PATH), and EXTQL_ISA when a kernel variant is
    asked for (the library reads it)."""
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    env["LC_ALL"] = "C"
    if isa:
        env["EXTQL_ISA"] = isa
    return env


def _raw(value: np.ndarray) -> tuple[int, bytes]:
    """An array's ONNX element type and its bytes in ONNX's layout."""
    value = np.asarray(value)
    data = ort_io.pack(value) if ort_io.is_packed(value.dtype) else np.ascontiguousarray(value)
    return ONNX_OF[value.dtype], data.tobytes()


def _array(code: int, shape: tuple[int, ...], raw: bytes) -> np.ndarray:
    dtype = DTYPE_OF[code]
    if ort_io.is_packed(dtype):
        return ort_io.unpack(np.frombuffer(raw, np.uint8), dtype, shape)
    return np.frombuffer(raw, dtype).reshape(shape).copy()


@dataclass
class Host:
    """The compiled host program."""

    exe: Path

    def run(self, library: str, jobs: Sequence[Job], workdir: Path,
            isa: str | None = None) -> HostResult:
        """Run the jobs in one host process with ``library`` registered in
        every session; files go to ``workdir``; ``isa`` is the kernel
        variant the library is told to run (EXTQL_ISA)."""
        workdir.mkdir(parents=True, exist_ok=True)
        args = [str(self.exe), library, str(workdir)]
        for j, job in enumerate(jobs):
            if isinstance(job.model, onnx.ModelProto):
                path = workdir / f"model{j}.onnx"
                onnx.save(job.model, str(path))
            else:
                path = job.model
            args += [*(["--"] if j else []), str(path)]
            for level, threads in job.runs:
                args += ["--run", f"{level}:{threads}"]
            for k, (name, value) in enumerate(job.feeds.items()):
                code, data = _raw(value)
                file = workdir / f"j{j}_in{k}.bin"
                file.write_bytes(data)
                args += ["--input", name, str(code), ",".join(map(str, np.shape(value))),
                         str(file)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300,
                              env=host_environment(isa))
        result = HostResult(proc.returncode, proc.stdout, proc.stderr,
                            [[{} for _ in job.runs] for job in jobs])
        for line in proc.stdout.splitlines():
            fields = line.split("\t")
            if fields[0] == "onnxruntime":
                result.version = fields[1]
            elif fields[0] == "mapped":
                result.mapped.append(fields[1])
            elif fields[0] == "failed":
                result.failed[int(fields[1])] = int(fields[2])
            elif fields[0] == "output":
                job, run, _, code, dims, file, name = fields[1:8]
                shape = tuple(int(d) for d in dims.split(",")) if dims else ()
                result.outputs[int(job)][int(run)][name] = _array(
                    int(code), shape, (workdir / file).read_bytes())
        return result


def build(workdir: Path) -> Host:
    """Compile tests/chost/host.c in ``workdir``, linked with the
    onnxruntime wheel's shared library (found through its SONAME,
    libonnxruntime.so.1, which a link in ``workdir/lib`` provides, as a C
    user's deployment does); warnings are errors."""
    ort_lib = onnxruntime_library()
    assert ort_lib is not None, unavailable()
    lib = workdir / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libonnxruntime.so.1").symlink_to(ort_lib)
    exe = workdir / "extql_c_host"
    cmd = [*(compiler() or []), "-std=c11", "-O1", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
           f"-I{SOURCES}", "-o", str(exe), str(SOURCES / "host.c"),
           f"-L{lib}", "-l:libonnxruntime.so.1", f"-Wl,-rpath,{lib}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return Host(exe)


def _bindable(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]):
    """The model and feeds with every input that this onnxruntime's Python
    API cannot bind (bfloat16 and float8 before typed OrtValues, 1.20) made
    an initializer holding the fed value."""
    if ort_io.has_typed_ortvalues():
        return model, dict(feeds)
    typed = {n for n, v in feeds.items()
             if np.asarray(v).dtype.name == "bfloat16" or np.asarray(v).dtype.name
             .startswith("float8")}
    if not typed:
        return model, dict(feeds)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [i for i in model.graph.input if i.name not in typed]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(tensor(n, np.asarray(feeds[n])) for n in typed)
    return model, {n: v for n, v in feeds.items() if n not in typed}


def run_python(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], level: int,
               threads: int) -> dict[str, np.ndarray]:
    """Every output of ``model`` run in this (Python) process with extql
    registered, at the C API's optimisation ``level`` number and with
    ``threads`` intra-op threads; outputs are allocated by onnxruntime and
    read with extql.ort_io.to_numpy (every type, packed ones included)."""
    model, feeds = _bindable(model, feeds)
    sess = session(model, threads=threads, level=_LEVEL[level])
    binding = sess.io_binding()
    alive = ort_io.bind_inputs(binding, feeds)  # kept until the run is over
    names = [o.name for o in sess.get_outputs()]
    for name in names:
        binding.bind_output(name)
    sess.run_with_iobinding(binding)
    del alive
    return {n: ort_io.to_numpy(v) for n, v in zip(names, binding.get_outputs(), strict=True)}
