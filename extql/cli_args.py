"""Argument types of the ``extql`` command shared by its sub-commands.

Each is an ``argparse`` ``type=`` callable: a bad value is rejected by
argparse itself with a one-line message naming the option (exit 2), before
any work starts.
"""

from __future__ import annotations

import argparse

__all__ = ["thread_count"]


def thread_count(text: str) -> int:
    """A thread count: an integer >= 0, where 0 means all cores."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of threads (0 = all cores), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"a thread count must be >= 0 (0 = all cores), got {value}")
    return value
