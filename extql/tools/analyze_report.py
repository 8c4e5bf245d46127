"""The report of ``extql analyze`` / :func:`extql.analyze` and its forms.

:class:`AnalysisReport` holds the figures (:mod:`extql.tools.analyze`
computes them) and writes them as

* a ranked table for the terminal (:meth:`AnalysisReport.table`);
* one JSON document (:meth:`AnalysisReport.to_dict`; JSON has no infinity
  or NaN: those are written as ``null``);
* a self-contained HTML page with inline SVG charts -- the local and
  accumulated SQNR of every point in graph order, the what-if gains --
  which needs nothing beyond the standard library
  (:meth:`AnalysisReport.to_html`);
* a PNG of the same charts, drawn by matplotlib, an optional dependency
  (``pip install "extql[plot]"``; :meth:`AnalysisReport.save`).
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = [
    "PointResult",
    "OutputResult",
    "WhatIfResult",
    "AnalysisReport",
    "PLOT_HINT",
    "format_db",
]

#: What to install for a PNG report.
PLOT_HINT = 'pip install "extql[plot]"'


def _finite_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def format_db(value: float | None, signed: bool = False) -> str:
    """A dB figure for people: one decimal, ``inf`` / ``-inf`` / ``nan``,
    ``-`` for None."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return ("+" if signed and value > 0 else "") + ("inf" if value > 0 else "-inf")
    return f"{value:+.1f}" if signed else f"{value:.1f}"


@dataclasses.dataclass
class PointResult:
    """The figures of one quantization point (dB; errors in the tensor's units)."""

    tensor: str
    node: str
    kind: str
    type: str
    local_sqnr_db: float
    accumulated_sqnr_db: float | None
    max_abs_error: float
    clipped_fraction: float
    graph_order: int

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "node": self.node, "kind": self.kind, "type": self.type,
                "local_sqnr_db": _finite_or_none(self.local_sqnr_db),
                "accumulated_sqnr_db": _finite_or_none(self.accumulated_sqnr_db),
                "max_abs_error": _finite_or_none(self.max_abs_error),
                "clipped_fraction": _finite_or_none(self.clipped_fraction),
                "graph_order": self.graph_order}


@dataclasses.dataclass
class OutputResult:
    """One graph output of QUANT against FLOAT's."""

    name: str
    sqnr_db: float
    cosine: float
    max_abs_error: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sqnr_db": _finite_or_none(self.sqnr_db),
                "cosine": _finite_or_none(self.cosine),
                "max_abs_error": _finite_or_none(self.max_abs_error)}


@dataclasses.dataclass
class WhatIfResult:
    """QUANT's outputs with one point bypassed or widened."""

    tensor: str
    node: str
    variant: str  # "bypass" | "widen"
    model_sqnr_db: float
    gain_db: float

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "node": self.node, "variant": self.variant,
                "model_sqnr_db": _finite_or_none(self.model_sqnr_db),
                "gain_db": _finite_or_none(self.gain_db)}


@dataclasses.dataclass
class AnalysisReport:
    """Where a quantized model loses its accuracy (docs/guide/analyze.rst).

    ``points`` are ranked worst local SQNR first (NaN first of all, +inf
    last); ``what_if_skipped`` lists the variants that did not apply, each
    with its reason; ``notes`` what the analysis could not look at."""

    points: list[PointResult]
    outputs: list[OutputResult]
    model_sqnr_db: float
    what_if: list[WhatIfResult]
    unmatched: list[str]
    samples: int
    random_inputs: bool
    what_if_skipped: list[dict[str, str]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    # ------------------------------------------------------------------
    # JSON

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (non-finite figures as None)."""
        return {
            "points": [p.to_dict() for p in self.points],
            "outputs": [o.to_dict() for o in self.outputs],
            "model_sqnr_db": _finite_or_none(self.model_sqnr_db),
            "what_if": [w.to_dict() for w in self.what_if],
            "what_if_skipped": list(self.what_if_skipped),
            "unmatched": list(self.unmatched),
            "samples": self.samples,
            "random_inputs": self.random_inputs,
            "notes": list(self.notes),
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text (strict: no NaN or Infinity)."""
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    # ------------------------------------------------------------------
    # Terminal

    def table(self, top: int | None = 20) -> str:
        """The report as text: outputs, the ``top`` worst points (all for
        None or 0), the what-if variants, what was not matched."""
        lines = [f"model SQNR {format_db(self.model_sqnr_db)} dB over {self.samples} "
                 f"sample(s){' of random inputs' if self.random_inputs else ''}"]
        for o in self.outputs:
            lines.append(f"  output {o.name}: SQNR {format_db(o.sqnr_db)} dB, cosine "
                         f"{o.cosine:.6f}, max |error| {o.max_abs_error:.4g}")
        shown = self.points if not top else self.points[:top]
        lines.append("")
        lines.append(f"quantization points, worst local SQNR first ({len(self.points)}):")
        rows = [("#", "tensor", "kind", "type", "local dB", "accum. dB", "max |err|",
                 "clipped")]
        for i, p in enumerate(shown, 1):
            rows.append((str(i), p.tensor, p.kind, p.type, format_db(p.local_sqnr_db),
                         format_db(p.accumulated_sqnr_db), f"{p.max_abs_error:.4g}",
                         f"{100 * p.clipped_fraction:.2f}%"))
        lines += _columns(rows, right={0, 4, 5, 6, 7})
        if len(shown) < len(self.points):
            lines.append(f"  ... and {len(self.points) - len(shown)} more (--top 0 shows all)")
        if self.what_if or self.what_if_skipped:
            lines.append("")
            lines.append("what-if (model SQNR with one point changed):")
            rows = [("tensor", "variant", "model dB", "gain dB")]
            rows += [(w.tensor, w.variant, format_db(w.model_sqnr_db),
                      format_db(w.gain_db, signed=True)) for w in self.what_if]
            lines += _columns(rows, right={2, 3})
            for s in self.what_if_skipped:
                lines.append(f"  {s['tensor']}: {s['variant']} skipped: {s['reason']}")
        if self.unmatched:
            lines.append("")
            lines.append("not in the float model (no accumulated error): "
                         + ", ".join(self.unmatched))
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)

    # ------------------------------------------------------------------
    # Pictures

    def to_html(self) -> str:
        """A self-contained HTML page (inline SVG, no script, no network)."""
        from .analyze_svg import gains_svg, sqnr_svg

        esc = html.escape
        parts = [
            "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            "<title>extql analyze</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
            "<h1>Where the quantized model loses its accuracy</h1>",
            f"<p>Model SQNR <b>{esc(format_db(self.model_sqnr_db))} dB</b> over "
            f"{self.samples} sample(s){' of random inputs' if self.random_inputs else ''}; "
            f"{len(self.points)} quantization point(s).</p>",
            "<h2>SQNR of every point, in graph order</h2>",
            sqnr_svg(self.points),
        ]
        if self.what_if:
            parts += ["<h2>What-if: model SQNR gained by changing one point</h2>",
                      gains_svg(self.what_if)]
        parts.append("<h2>Outputs</h2>")
        parts.append(_html_table(
            ["output", "SQNR dB", "cosine", "max |error|"],
            [[o.name, format_db(o.sqnr_db), f"{o.cosine:.6f}", f"{o.max_abs_error:.4g}"]
             for o in self.outputs]))
        parts.append("<h2>Points, worst local SQNR first</h2>")
        parts.append(_html_table(
            ["#", "tensor", "node", "kind", "type", "local dB", "accumulated dB",
             "max |error|", "clipped"],
            [[str(i), p.tensor, p.node, p.kind, p.type, format_db(p.local_sqnr_db),
              format_db(p.accumulated_sqnr_db), f"{p.max_abs_error:.4g}",
              f"{100 * p.clipped_fraction:.2f}%"] for i, p in enumerate(self.points, 1)]))
        if self.what_if or self.what_if_skipped:
            parts.append("<h2>What-if</h2>")
            parts.append(_html_table(
                ["tensor", "variant", "model SQNR dB", "gain dB"],
                [[w.tensor, w.variant, format_db(w.model_sqnr_db),
                  format_db(w.gain_db, signed=True)] for w in self.what_if]
                + [[s["tensor"], s["variant"], "skipped", s["reason"]]
                   for s in self.what_if_skipped]))
        if self.unmatched:
            parts.append("<h2>Not in the float model</h2>")
            parts.append("<p>" + esc(", ".join(self.unmatched)) + "</p>")
        if self.notes:
            parts.append("<h2>Notes</h2><ul>"
                         + "".join(f"<li>{esc(n)}</li>" for n in self.notes) + "</ul>")
        parts += ["</body>", "</html>"]
        return "\n".join(parts) + "\n"

    def save(self, path: str | os.PathLike) -> Path:
        """Write the report to ``path``: ``.html`` / ``.htm`` a page, ``.png``
        a picture (needs matplotlib), ``.json`` the document.  Raises
        ValueError for another suffix, ImportError naming what to install
        when matplotlib is missing."""
        p = Path(path)
        suffix = p.suffix.lower()
        if suffix in (".html", ".htm"):
            p.write_text(self.to_html(), encoding="utf-8")
        elif suffix == ".png":
            write_png(self, p)
        elif suffix == ".json":
            p.write_text(self.to_json(indent=1) + "\n", encoding="utf-8")
        else:
            raise ValueError(f"{p}: a report is .html, .png or .json, "
                             f"not {suffix or 'no suffix'!r}")
        return p


def _columns(rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    esc = html.escape
    out = ["<table>", "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows]
    out.append("</table>")
    return "\n".join(out)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:2px 8px;text-align:right;font-size:90%}"
    "th{background:#f3f3f3}td:nth-child(2){text-align:left}"
    "svg{background:#fff;border:1px solid #ddd}"
)


def require_matplotlib() -> None:
    """ImportError naming the extra when matplotlib is not installed (checked
    before the work, so that a PNG report does not fail at the end)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError(f"a PNG report needs matplotlib, which is not installed: "
                          f"{PLOT_HINT} (an .html report needs nothing)", name="matplotlib")


def write_png(report: AnalysisReport, path: str | os.PathLike) -> None:
    """Draw the report's charts into a PNG with matplotlib."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    by_order = sorted(report.points, key=lambda p: p.graph_order)
    rows = 2 if report.what_if else 1
    fig, axes = plt.subplots(rows, 1, figsize=(11, 4.2 * rows), squeeze=False)
    ax = axes[0][0]
    xs = list(range(len(by_order)))
    finite = [v for p in by_order for v in (p.local_sqnr_db, p.accumulated_sqnr_db)
              if v is not None and math.isfinite(v)]
    top = (max(finite) if finite else 0.0) + 5.0
    bottom = (min(finite) if finite else 0.0) - 5.0
    series = (("local_sqnr_db", "local SQNR", "o-", "#1f77b4"),
              ("accumulated_sqnr_db", "accumulated SQNR", "s--", "#ff7f0e"))
    for attr, label, style, color in series:
        values = [getattr(p, attr) for p in by_order]
        ax.plot(xs, [v if v is not None and math.isfinite(v) else math.nan for v in values],
                style, label=label, color=color)
        exact = [x for x, v in zip(xs, values, strict=True) if v == math.inf]
        if exact:
            ax.plot(exact, [top] * len(exact), "^", color=color, markersize=8,
                    label=f"{label}: exact (inf)")
    ax.set_ylim(bottom - 1, top + 2)
    ax.set_ylabel("dB")
    ax.set_title(f"SQNR per quantization point, graph order (model SQNR "
                 f"{format_db(report.model_sqnr_db)} dB)")
    ax.set_xticks(xs)
    ax.set_xticklabels([p.tensor for p in by_order], rotation=60, ha="right", fontsize=7)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    if report.what_if:
        ax2 = axes[1][0]
        labels = [f"{w.tensor} ({w.variant})" for w in report.what_if]
        raw = [w.gain_db for w in report.what_if]
        cap = max([0.0, *(abs(g) for g in raw if math.isfinite(g))]) + 1.0
        gains = [0.0 if math.isnan(g) else cap if g == math.inf else -cap if g == -math.inf
                 else g for g in raw]
        colors = ["#2ca02c" if w.variant == "bypass" else "#9467bd" for w in report.what_if]
        ax2.bar(range(len(labels)), gains, color=colors, width=0.6)
        ax2.set_xlim(-0.8, max(len(labels), 8) - 0.2)
        ax2.axhline(0, color="#444", linewidth=0.8)
        ax2.set_xticks(range(len(labels)))
        ax2.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax2.set_ylabel("gain in model SQNR, dB")
        ax2.set_title("What-if: one point bypassed (green) or widened (purple)")
        ax2.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(path), format="png", dpi=100)
    plt.close(fig)
