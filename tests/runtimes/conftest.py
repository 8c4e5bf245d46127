"""tests/runtimes runs where OpenVINO or tract is installed: the tox envs
``openvino`` and ``tract`` install theirs and name it in ``EXTQL_RUNTIMES``,
which makes a missing runtime an error.  Elsewhere (the README's test
command) the modules are not collected, rather than reported as empty
parameter sets."""

from __future__ import annotations

import importlib.util
import os

_WANTED = [n for n in os.environ.get("EXTQL_RUNTIMES", "").split(",") if n]
if not _WANTED and not any(importlib.util.find_spec(n) for n in ("openvino", "tract")):
    collect_ignore_glob = ["test_*.py"]
