"""Progress lines of the ``extql`` commands, on stderr (``-q`` silences them).

Progress goes to stderr so that stdout carries only the command's result
(which ``--json`` collects).
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["log", "Progress", "PROGRESS_NODES"]

#: Loops over at least this many nodes get "label: i/n" lines.
PROGRESS_NODES = 200


def log(args: argparse.Namespace, message: str) -> None:
    """Print ``message`` on stderr unless the command was given ``-q``."""
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr, flush=True)


class Progress:
    """Prints "label: i/n (t s)" lines on stderr about every 10% of a long loop."""

    def __init__(self, args: argparse.Namespace, label: str, total: int) -> None:
        self.args, self.label, self.total = args, label, total
        self.enabled = total >= PROGRESS_NODES and not getattr(args, "quiet", False)
        self.step = max(1, total // 10)
        self.start = time.monotonic()

    def update(self, i: int) -> None:
        """Report that item ``i`` (1-based) of the loop is done."""
        if self.enabled and (i % self.step == 0 or i == self.total):
            elapsed = time.monotonic() - self.start
            print(f"  {self.label}: {i}/{self.total} ({elapsed:.1f} s)", file=sys.stderr,
                  flush=True)
