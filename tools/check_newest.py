"""Check that an environment holds the newest release of each of extql's
dependencies, and print what it holds.

Usage: ``python tools/check_newest.py`` (run by ``tox -e newest`` before its
tests).  The dependencies are read from the installed extql's metadata: the
core ones and those of the ``test`` extra, the set the README's set-up
installs.  For each, the installed version is compared with the newest
release on the package index (``pip index versions``, pre-releases left
out).  One that is older fails the check, naming it, unless another
installed distribution's requirement excludes the newer release (a cap such
as ``onnx-ir<2``): a fresh install gets the capped version too, so that is
what users have, and it is printed as capped.

A failure means the environment is stale (a tox env created before the
release: ``tox -r -e newest`` recreates it) or pip's resolver kept an old
release; either way the tests would not be testing what a fresh machine
gets.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version


def declared() -> list[str]:
    """The names of extql's core and ``test`` dependencies."""
    names: list[str] = []
    for text in metadata.requires("extql") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": "test"}):
            if req.name not in names:
                names.append(req.name)
    return names


def newest_release(name: str) -> Version | None:
    """The newest non-pre-release version of ``name`` on the index, or None
    when pip cannot say (no index reachable)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                          capture_output=True, text=True, check=False)
    found = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if proc.returncode != 0 or not found:
        return None
    versions = []
    for text in found.group(1).split(","):
        try:
            v = Version(text.strip())
        except InvalidVersion:
            continue
        if not v.is_prerelease and not v.is_devrelease:
            versions.append(v)
    return max(versions) if versions else None


def caps(name: str, version: Version) -> list[str]:
    """The installed distributions whose requirement on ``name`` excludes
    ``version``, as 'dist (requirement)'."""
    found = []
    canonical = name.lower().replace("_", "-")
    for dist in metadata.distributions():
        for text in dist.requires or []:
            req = Requirement(text)
            if req.name.lower().replace("_", "-") != canonical:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if not req.specifier.contains(version, prereleases=True):
                found.append(f"{dist.metadata['Name']} ({text})")
    return found


def main() -> int:
    rows, stale, unknown = [], [], []
    for name in declared():
        installed = Version(metadata.version(name))
        newest = newest_release(name)
        if newest is None:
            unknown.append(name)
            state = "newest unknown"
        elif installed >= newest:
            state = "newest"
        else:
            capped = caps(name, newest)
            state = f"capped at {installed} by {', '.join(capped)}" if capped else "STALE"
            if not capped:
                stale.append(f"{name} {installed} (newest {newest})")
        rows.append({"name": name, "installed": str(installed),
                     "newest": None if newest is None else str(newest), "state": state})
    for row in rows:
        print(f"{row['name']:<16} {row['installed']:<12} {row['state']}")
    if "--json" in sys.argv[1:]:
        print(json.dumps(rows))
    if unknown:
        print(f"check_newest: no index answered for {', '.join(unknown)}", file=sys.stderr)
        return 1
    if stale:
        print("check_newest: not the newest release: " + "; ".join(stale)
              + " (recreate the env: tox -r -e newest)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
