"""The public names and module paths stay importable across the package's layout.

The NumPy API and the rules moved into the packages ``extql.api`` and
``extql.rules``; every name users import from ``extql`` and every module path
the documentation or earlier releases give must still resolve, to the same
objects as the new paths (a copy would make two type tables, two sets of
rules).  Run in a fresh interpreter, so that ``import extql.types`` is tried
before anything else has imported the package.
"""

from __future__ import annotations

import subprocess
import sys

import extql
import extql.api
import extql.rules
import extql.rules.blocks
import extql.rules.linear
import extql.rules.types

#: earlier module path -> the module it now names.
EARLIER = {
    "extql.types": extql.rules.types,
    "extql.block_rules": extql.rules.blocks,
    "extql.numpy_api": extql.api.linear,
    "extql.numpy_out": extql.api.out,
    "extql.block_formats": extql.api.blocks,
}


def test_the_earlier_module_paths_are_the_moved_modules():
    import importlib

    for path, module in EARLIER.items():
        assert importlib.import_module(path) is module, path
        assert getattr(extql, path.split(".")[1]) is module, path


def test_the_earlier_paths_import_first_in_a_fresh_process():
    code = (
        "from extql.types import QTYPES, DOMAIN\n"
        "from extql.block_rules import check_bfp\n"
        "import extql.numpy_api, extql.block_formats, extql.rules\n"
        "from extql.rules import ATTRIBUTES, default_precision, attribute_names\n"
        "import extql.rules.types as t\n"
        "assert t.QTYPES is QTYPES and DOMAIN == 'com.amd.quark'\n"
        "assert extql.numpy_api.quantize_linear is extql.quantize_linear\n"
        "assert extql.block_formats.bfp_quantize_dequantize is extql.bfp_quantize_dequantize\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_every_name_of_all_resolves():
    for name in extql.__all__:
        assert getattr(extql, name) is not None, name
    assert extql.rules.ATTRIBUTES is extql.rules.linear.ATTRIBUTES
    assert set(extql.api.__all__) <= set(extql.__all__)
