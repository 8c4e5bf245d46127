"""``python -m extql_bench``: the same as ``extql bench``."""

import sys

from .cli import main

sys.exit(main(prog="python -m extql_bench"))
