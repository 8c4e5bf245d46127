"""Shared pytest setup: make tests/contract.py importable and register markers."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
