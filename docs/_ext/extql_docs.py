"""Local Sphinx directives for the extql documentation.

``extql-if-available``
    ``.. extql-if-available:: extql.register extql.get_library_path`` followed
    by indented reST (typically autodoc directives).  The body is parsed when
    every named object can be imported from the installed package; otherwise a
    note names what this build lacks (or, with ``extql_docs_strict = True`` in
    conf.py, a warning is logged, which ``-W`` turns into a failed build).

``extql-cli-help``
    The ``--help`` text of the ``extql`` command and of every sub-command, read
    from ``extql.cli.build_parser()`` at build time, so the page lists exactly
    the commands the installed package has.

``extql-runtime-limits``
    The table of :data:`extql.tools.runtimes.LIMITS`: where OpenVINO and tract
    do not keep the fallbacks' bits, read at build time, so the page says
    what ``extql inline --target`` warns by and what tests/runtimes holds.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


def resolve(dotted: str) -> Any:
    """Import ``a.b.c`` as the longest importable module prefix plus attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


class IfAvailable(SphinxDirective):
    """Parse the body only when all the named objects exist."""

    required_arguments = 1
    final_argument_whitespace = True
    has_content = True

    def run(self) -> list[nodes.Node]:
        names = self.arguments[0].split()
        missing = []
        for name in names:
            try:
                resolve(name)
            except (ImportError, AttributeError):
                missing.append(name)
        if not missing:
            container = nodes.container()
            self.state.nested_parse(self.content, self.content_offset, container)
            return container.children
        if self.config.extql_docs_strict:
            logger.warning(
                "extql-if-available: not in the installed package: %s",
                ", ".join(missing),
                location=self.get_location(),
            )
        note = nodes.note()
        para = nodes.paragraph()
        para += nodes.Text("Not in this build of extql yet: ")
        for i, name in enumerate(missing):
            if i:
                para += nodes.Text(", ")
            para += nodes.literal(text=name)
        para += nodes.Text(" (the user guide describes what it will do).")
        note += para
        return [note]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


class CliHelp(SphinxDirective):
    """Literal blocks with ``extql --help`` and ``extql COMMAND --help``."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from extql.cli import build_parser

        saved = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "88"  # argparse wraps to the terminal width
        try:
            parser = build_parser()
            out: list[nodes.Node] = [self._block("extql --help", parser.format_help())]
            for name, sub in _subcommands(parser).items():
                section = nodes.rubric(text=f"extql {name}")
                out += [section, self._block(f"extql {name} --help", sub.format_help())]
        finally:
            if saved is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = saved
        return out

    @staticmethod
    def _block(command: str, text: str) -> nodes.literal_block:
        body = f"$ {command}\n{text.rstrip()}"
        block = nodes.literal_block(body, body)
        block["language"] = "text"
        return block


class RuntimeLimits(SphinxDirective):
    """A list-table of ``extql.tools.runtimes.LIMITS``."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from extql.tools.runtimes import LIMITS, TESTED

        ops = {"Q": "quantize", "DQ": "dequantize", "BFP": "BFP block formats",
               "MX": "MX block formats", "IN": "ExtendedInstanceNormalization",
               "LSTM": "ExtendedLSTM"}
        zero = {"zero": ", zero point 0", "nonzero": ", zero point not 0", None: ""}
        lines = [".. list-table::", "   :header-rows: 1", "",
                 "   * - runtime", "     - nodes", "     - verdict", "     - why"]
        for lim in LIMITS:
            types = ", ".join(lim.types) if lim.types else "every type"
            what = f"{ops[lim.op]}: {types}" if lim.op in ("Q", "DQ") else ops[lim.op]
            what += zero[lim.zero_point] + (", per tensor" if lim.granularity else "")
            lines += [f"   * - {lim.runtime} {TESTED[lim.runtime]}", f"     - {what}",
                      f"     - {lim.verdict}", f"     - {lim.cause}"]
        from docutils.statemachine import StringList

        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="extql.tools.runtimes.LIMITS"),
                                self.content_offset, container)
        return container.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("extql_docs_strict", False, "env")
    app.add_directive("extql-if-available", IfAvailable)
    app.add_directive("extql-cli-help", CliHelp)
    app.add_directive("extql-runtime-limits", RuntimeLimits)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
