"""Inline SVG charts of the ``extql analyze`` HTML page, drawn by hand (no
plotting library): the SQNR of every point in graph order, and the what-if
gains.  Infinite values (an exact point) are drawn at the top edge with a
marker of their own; every marker has a tooltip with its figures."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

__all__ = ["sqnr_svg", "gains_svg", "nice_ticks"]

_W, _H = 1000, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 60, 20, 44, 110
_SERIES = (("local_sqnr_db", "local SQNR", "#1f77b4"),
           ("accumulated_sqnr_db", "accumulated SQNR", "#ff7f0e"))


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else [0.0]
    raw = (hi - lo) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    v = first
    while v <= hi + 1e-9 * step:
        ticks.append(round(v, 10))
        v += step
    return ticks


def _fmt(v: float) -> str:
    return f"{v:.1f}"


def _label(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _frame(title: str, lo: float, hi: float, ylabel: str) -> tuple[list[str], Any]:
    """The SVG's opening, title, axes and y grid; returns the parts and the
    y mapping."""
    plot_h = _H - _TOP - _BOTTOM

    def y_of(v: float) -> float:
        return _TOP + plot_h * (hi - v) / (hi - lo)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
             f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11">',
             f'<text x="{_W / 2}" y="18" text-anchor="middle" font-size="13">'
             f'{html.escape(title)}</text>']
    for t in nice_ticks(lo, hi):
        y = y_of(t)
        parts.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" '
                     'stroke="#e5e5e5"/>')
        parts.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    parts.append(f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" '
                 'stroke="#444"/>')
    parts.append(f'<text x="14" y="{_TOP + plot_h / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {_TOP + plot_h / 2:.1f})">{html.escape(ylabel)}'
                 '</text>')
    return parts, y_of


def _x_labels(names: Sequence[str], x_of) -> list[str]:
    """Names under the x axis, rotated; every k-th when there are many."""
    step = max(1, math.ceil(len(names) / 60))
    out = []
    base = _H - _BOTTOM + 12
    for i in range(0, len(names), step):
        x = x_of(i)
        out.append(f'<text x="{x:.1f}" y="{base}" text-anchor="end" '
                   f'transform="rotate(-60 {x:.1f} {base})">{html.escape(_label(names[i]))}'
                   '</text>')
    return out


def sqnr_svg(points: Sequence[Any]) -> str:
    """Local and accumulated SQNR of ``points`` (PointResult) in graph order."""
    by_order = sorted(points, key=lambda p: p.graph_order)
    values = [getattr(p, attr) for p in by_order for attr, _, _ in _SERIES]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    lo = (min(finite) if finite else 0.0) - 5.0
    hi = (max(finite) if finite else 0.0) + 5.0
    parts, y_of = _frame("SQNR per quantization point (graph order); \u221e: exact",
                         lo, hi + 4.0, "dB")
    n = len(by_order)
    plot_w = _W - _LEFT - _RIGHT

    def x_of(i: int) -> float:
        return _LEFT + plot_w * ((i + 0.5) / max(n, 1))

    top_y, bottom_y = y_of(hi + 2.0), y_of(lo)
    for attr, name, color in _SERIES:
        segments: list[list[str]] = [[]]
        marks = []
        for i, p in enumerate(by_order):
            v = getattr(p, attr)
            if v is None or math.isnan(v):
                segments.append([])
                continue
            y = top_y if v == math.inf else bottom_y if v == -math.inf else y_of(v)
            segments[-1].append(f"{x_of(i):.1f},{y:.1f}")
            tip = html.escape(f"{p.tensor} ({p.kind}, {p.type}): {name} "
                              f"{'inf' if v == math.inf else _fmt(v)} dB")
            shape = "rect" if attr.startswith("acc") else "circle"
            if math.isinf(v):
                marks.append(f'<path class="{attr}" d="M{x_of(i) - 4:.1f},{y + 4:.1f} '
                             f'L{x_of(i):.1f},{y - 4:.1f} L{x_of(i) + 4:.1f},{y + 4:.1f} Z" '
                             f'fill="{color}"><title>{tip}</title></path>')
            elif shape == "circle":
                marks.append(f'<circle class="{attr}" cx="{x_of(i):.1f}" cy="{y:.1f}" r="3.5" '
                             f'fill="{color}"><title>{tip}</title></circle>')
            else:
                marks.append(f'<rect class="{attr}" x="{x_of(i) - 3:.1f}" y="{y - 3:.1f}" '
                             f'width="6" height="6" fill="{color}"><title>{tip}</title></rect>')
        for seg in segments:
            if len(seg) > 1:
                parts.append(f'<polyline points="{" ".join(seg)}" fill="none" '
                             f'stroke="{color}" stroke-width="1.3"/>')
        parts += marks
    parts += _x_labels([p.tensor for p in by_order], x_of)
    for k, (_, name, color) in enumerate(_SERIES):
        x = _LEFT + 10 + 170 * k
        parts.append(f'<rect x="{x}" y="{_TOP - 2}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14}" y="{_TOP + 7}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def gains_svg(what_if: Sequence[Any]) -> str:
    """Bars of the what-if gains (WhatIfResult), in the report's order; an
    infinite gain (the outputs become exact) is drawn to the top edge."""
    gains = [w.gain_db for w in what_if]
    finite = [g for g in gains if g is not None and math.isfinite(g)]
    hi = max([0.0, *finite]) + 1.0
    lo = min([0.0, *finite]) - 1.0
    parts, y_of = _frame("Gain in model SQNR with one point changed", lo, hi, "dB")
    n = len(what_if)
    plot_w = _W - _LEFT - _RIGHT
    width = min(40.0, 0.7 * plot_w / max(n, 1))

    def x_of(i: int) -> float:
        return _LEFT + plot_w * ((i + 0.5) / max(n, 1))

    zero = y_of(0.0)
    parts.append(f'<line x1="{_LEFT}" y1="{zero:.1f}" x2="{_W - _RIGHT}" y2="{zero:.1f}" '
                 'stroke="#444"/>')
    for i, w in enumerate(what_if):
        g = w.gain_db
        if g is None or math.isnan(g):
            continue
        top = y_of(hi) if g == math.inf else y_of(lo) if g == -math.inf else y_of(g)
        y, h = min(top, zero), abs(zero - top)
        color = "#2ca02c" if w.variant == "bypass" else "#9467bd"
        tip = html.escape(f"{w.tensor} {w.variant}: model SQNR "
                          f"{'inf' if w.model_sqnr_db == math.inf else _fmt(w.model_sqnr_db)}"
                          f" dB, gain {'inf' if g == math.inf else _fmt(g)} dB")
        parts.append(f'<rect class="gain" x="{x_of(i) - width / 2:.1f}" y="{y:.1f}" '
                     f'width="{width:.1f}" height="{h:.1f}" fill="{color}">'
                     f'<title>{tip}</title></rect>')
    parts += _x_labels([f"{w.tensor} ({w.variant})" for w in what_if], x_of)
    for k, (name, color) in enumerate((("bypass", "#2ca02c"), ("widen", "#9467bd"))):
        x = _LEFT + 10 + 120 * k
        parts.append(f'<rect x="{x}" y="{_TOP - 2}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14}" y="{_TOP + 7}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
