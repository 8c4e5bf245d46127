"""Check a built source distribution of extql: what it carries, its metadata,
and that it installs into a fresh virtual environment where ``extql info`` runs.

Usage: ``python tools/check_sdist.py DIST_DIR`` (run by ``tox -e sdist`` after
``python -m build --sdist --outdir DIST_DIR``).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Files a build from the sdist cannot do without, relative to the sdist root.
REQUIRED = [
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "LICENSE",
    "README.md",
    "extql/__init__.py",
    "extql/_version.py",
    "extql/_kernels.pyx",
    "extql/py.typed",
    "CHANGELOG.md",
    "tox.ini",
    "tests/contract.py",
    "docs/conf.py",
    "extql/rules/typetable.py",
    "tools/gen_types_header.py",
    "tools/gen_rules_header.py",
    "tools/gen_block_rules_header.py",
    "tools/gen_kernels.py",
    "tools/tempita.py",
    "extql_bench/cli.py",
    "benchmarks/copy_ops/copy_ops.c",
    # tox's sdist env runs it, so a tox run from the unpacked sdist can too.
    "tools/check_sdist.py",
]
# Every Python module of the package, subpackages included.
REQUIRED += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "extql").rglob("*.py"))]
# Every test module and helper, in whichever area folder of tests/ it sits,
# and the C host the tests compile.
REQUIRED += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "tests").rglob("*.py"))]
REQUIRED += [p.relative_to(ROOT).as_posix()
             for p in sorted((ROOT / "tests" / "chost").glob("*.[ch]"))]
# Generated at build time (by Cython, or from the tables), or build products:
# never shipped.
FORBIDDEN_SUFFIXES = (".so", ".pyd", ".o", ".pyc")
FORBIDDEN = ["extql/_kernels.c", "extql/_kernels.h", "extql/src/extql_types.h",
             "extql/src/extql_kernels.h", "extql/src/extql_block_rules.h"]
# Every C source, header and header template under extql/src in the
# working tree (but the generated ones), and the kernels' dispatch unit with its templates.
REQUIRED += [
    p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "extql" / "src").iterdir())
    if p.name.endswith((".c", ".h", ".h.tp")) and p.relative_to(ROOT).as_posix() not in FORBIDDEN
]
REQUIRED += [
    p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "extql" / "kernels").iterdir())
    if p.suffix in (".pyx", ".pxi", ".tp")
]


def check_contents(sdist: Path) -> None:
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    missing = [f for f in REQUIRED if f not in names]
    shipped_generated = [n for n in names if n in FORBIDDEN or n.endswith(FORBIDDEN_SUFFIXES)]
    if missing or shipped_generated:
        raise SystemExit(
            f"{sdist.name}: missing {missing or 'nothing'}; "
            f"generated files shipped: {shipped_generated or 'none'}"
        )
    print(f"{sdist.name}: {len(names)} files, all {len(REQUIRED)} required present, "
          "no generated C or binaries")


def check_install(sdist: Path, work: Path) -> None:
    """pip install the sdist into a new venv (a real compile) and run extql."""
    env_dir = work / "sdist-venv"
    venv.create(env_dir, with_pip=True, clear=True)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", str(sdist)], check=True)
    subprocess.run([bindir / "extql", "info"], check=True)
    out = subprocess.run([bindir / "extql", "--version"], check=True, capture_output=True,
                         text=True).stdout.strip()
    print(f"installed from the sdist: {out}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    dist = Path(argv[0])
    sdists = [Path(p) for p in glob.glob(str(dist / "extql-*.tar.gz"))]
    if len(sdists) != 1:
        raise SystemExit(f"expected one extql-*.tar.gz in {dist}, found {sdists}")
    sdist = sdists[0]
    check_contents(sdist)
    subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist)], check=True)
    check_install(sdist, dist)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
