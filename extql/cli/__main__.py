"""``python -m extql.cli``: the ``extql`` command (:func:`extql.cli.main`)."""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
