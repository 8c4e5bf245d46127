"""Run the tests under AddressSanitizer, LeakSanitizer and UBSan, and judge
the sanitizers' reports (``tox -e asan``).

    EXTQL_SANITIZE=address,undefined python tests/run_sanitized.py --build DIR
    python tests/run_sanitized.py [pytest arguments]

``--build DIR`` copies the source tree to DIR (without build products) and
installs it from there with ``EXTQL_SANITIZE`` (default address,undefined),
so the worktree's own build directory never mixes normal and sanitized
objects.

extql must have been built with ``EXTQL_SANITIZE`` (setup.py): this script
checks that the extension is instrumented, preloads GCC's sanitizer runtimes
into Python (``gcc -print-file-name=libasan.so``; ``EXTQL_ASAN_LIBS`` to
override), turns onnxruntime's memory arena off in the tests' sessions
(``EXTQL_TEST_NO_ARENA``, so each tensor is its own guarded allocation), and
runs pytest -- the child processes the tests start inherit all of it.

Every process writes its reports to a log directory.  Afterwards:

* any AddressSanitizer error (overflow, use after free, double free ...) or
  UBSan runtime error, in any process, fails the run;
* LeakSanitizer's leak reports at exit are split into leaks allocated by
  extql's own code (a stack frame in an ort_*.c file, extql/_kernels.pyx or an
  ``extql_`` function, outside the one-time module initialisation) -- any of
  these fails the run -- and the rest (Python's and onnxruntime's objects
  still alive at exit), which are counted and reported.

The last line printed is a JSON summary.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Allocations by Python's own allocators are Python objects alive at exit.
SUPPRESSIONS = """\
leak:_PyObject_Malloc
leak:_PyObject_Calloc
leak:_PyObject_Realloc
leak:PyMem_RawMalloc
leak:PyMem_RawCalloc
leak:PyMem_RawRealloc
leak:_PyMem_RawMalloc
leak:_PyMem_RawRealloc
leak:_PyMem_RawCalloc
leak:PyThread_allocate_lock
"""

OURS = re.compile(r"ort_[a-z]+\.c|extql/_kernels\.pyx|\bin extql_|\bin kernel_(create|compute)")
MODULE_INIT = re.compile(r"__pyx_pymod_exec|__Pyx_modinit|PyInit__kernels|__Pyx_InitGlobals")


def runtime_libs() -> list[str]:
    env = os.environ.get("EXTQL_ASAN_LIBS")
    if env:
        return env.split(":")
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                              text=True, check=True).stdout.strip()
        if not os.path.isabs(path) or not os.path.exists(path):
            raise SystemExit(f"run_sanitized: gcc has no {name} (install libasan / libubsan)")
        libs.append(os.path.realpath(path))
    return libs


def instrumented() -> str:
    """The path of extql._kernels, which must reference the ASan runtime."""
    # Located without importing extql (whose import loads the extension,
    # which needs the runtime preloaded).
    code = ("import glob, importlib.util as u, os; "
            "d = u.find_spec('extql').submodule_search_locations[0]; "
            "print(glob.glob(os.path.join(d, '_kernels*.so'))[0])")
    path = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=str(HERE.parent.parent)).stdout.strip()
    with open(path, "rb") as f:
        if b"__asan_init" not in f.read():
            raise SystemExit(f"run_sanitized: {path} is not built with EXTQL_SANITIZE=address")
    return path


def judge(logdir: str, console: str) -> dict:
    errors, ub, ours, others = [], [], [], 0
    texts = [(os.path.basename(p), open(p, errors="replace").read())
             for p in sorted(glob.glob(os.path.join(logdir, "*")))]
    for path, text in texts + [("pytest output", console)]:
        for m in re.finditer(r"ERROR: AddressSanitizer: .*", text):
            errors.append(f"{path}: {m.group(0)}\n" + text[m.start():][:3000])
        for m in re.finditer(r".*runtime error: .*", text):
            ub.append(f"{path}: {m.group(0)}\n" + text[m.start():][:2000])
        for block in re.split(r"\n(?=(?:Direct|Indirect) leak of )", text):
            if not re.match(r"(Direct|Indirect) leak of", block):
                continue
            block = block.split("\n\n")[0]
            if OURS.search(block) and not MODULE_INIT.search(block):
                ours.append(block[:2500])
            else:
                others += 1
    return {"asan_errors": errors, "ubsan_errors": ub, "extql_leaks": ours,
            "other_leak_reports": others, "log_files": len(glob.glob(os.path.join(logdir, "*")))}


def build(dest: str) -> int:
    """Copy the tree to dest and pip-install it with the sanitizers."""
    root = HERE.parent
    if os.path.exists(dest):
        shutil.rmtree(dest)
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns(
        ".git", ".tox", ".venv*", "build", "dist", "*.so", "*.egg-info", "_kernels.c",
        "__pycache__", ".hypothesis", ".pytest_cache"))
    env = dict(os.environ)
    env.setdefault("EXTQL_SANITIZE", "address,undefined")
    cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
           "--force-reinstall", dest]
    print("run_sanitized:", " ".join(cmd), f"(EXTQL_SANITIZE={env['EXTQL_SANITIZE']})",
          flush=True)
    return subprocess.run(cmd, env=env).returncode


def main() -> int:
    if sys.argv[1:2] == ["--build"]:
        return build(sys.argv[2])
    so_path = instrumented()
    logdir = tempfile.mkdtemp(prefix="extql-sanitize-")
    supp = os.path.join(logdir, "..", os.path.basename(logdir) + ".supp")
    with open(supp, "w") as f:
        f.write(SUPPRESSIONS)
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(runtime_libs() + [p for p in env.get("LD_PRELOAD", "").split(":")
                                                   if p])
    env["ASAN_OPTIONS"] = (f"detect_leaks=1:log_path={logdir}/asan:malloc_context_size=30:"
                           "fast_unwind_on_malloc=0:detect_stack_use_after_return=0:"
                           # errors abort (a crash the tests see); leaks at exit leave
                           # the exit code alone and are judged from the logs
                           "abort_on_error=1:exitcode=0")
    env["LSAN_OPTIONS"] = f"suppressions={os.path.abspath(supp)}:print_suppressions=0"
    env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:log_path={logdir}/ubsan"
    env["EXTQL_TEST_NO_ARENA"] = "1"
    args = sys.argv[1:] or ["tests"]
    print(f"run_sanitized: {so_path}\n  LD_PRELOAD={env['LD_PRELOAD']}\n  logs in {logdir}",
          flush=True)
    # The pytest script, not "python -m pytest": that would put the source
    # tree first on sys.path and import its extql instead of the installed,
    # instrumented one.
    # --capture=sys: UBSan writes its reports to file descriptor 2 whatever
    # log_path says, and pytest's default fd capture would swallow the report
    # of a process that UBSan stops; so fd 2 stays ours, and is scanned.
    pytest = os.path.join(os.path.dirname(sys.executable), "pytest")
    proc = subprocess.Popen([pytest, "-p", "no:cacheprovider", "--capture=sys", *args],
                            env=env, cwd=str(HERE.parent), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    console = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        console.append(line)
    proc.wait()
    summary = judge(logdir, "".join(console))
    for e in summary["asan_errors"][:5]:
        print("\n" + e)
    for e in summary["ubsan_errors"][:20]:
        print(e)
    for e in summary["extql_leaks"][:5]:
        print("\nleak allocated by extql:\n" + e)
    result = {
        "pytest_exit_code": proc.returncode,
        "asan_errors": len(summary["asan_errors"]),
        "ubsan_errors": len(summary["ubsan_errors"]),
        "extql_leaks": len(summary["extql_leaks"]),
        "other_leak_reports_at_exit": summary["other_leak_reports"],
        "processes_reporting": summary["log_files"],
    }
    print(json.dumps(result))
    bad = proc.returncode or result["asan_errors"] or result["ubsan_errors"] or \
        result["extql_leaks"]
    if bad:
        print(f"run_sanitized: the reports are in {logdir}")
    else:  # hundreds of MB of Python's objects alive at exit: not worth keeping
        shutil.rmtree(logdir, ignore_errors=True)
        os.remove(supp)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
