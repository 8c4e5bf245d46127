"""Opening an onnxruntime session at the highest optimisation level that loads.

Some valid models do not load at onnxruntime's default optimisation level:
its Q/DQ propagation and QGemm / QDQ fusions rewrite Quark's int32 Q/DQ pairs
into ``QuantizeLinear`` nodes of int32 (or fused quantized kernels) that
onnxruntime then rejects ("Type 'tensor(int32)' of input parameter ... of
operator (QuantizeLinear)"), with AMD Quark's own library as with extql's.
The model itself is fine: with fewer graph rewrites it loads and runs.
:func:`open_session` therefore steps the level down (all -> extended -> basic
-> disabled) and says which level it used and why.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

__all__ = ["LEVELS", "open_session", "SessionError"]

#: Level names, highest first, as onnxruntime's GraphOptimizationLevel names them.
LEVELS = ("all", "extended", "basic", "disabled")


class SessionError(Exception):
    """onnxruntime could not load the model at any optimisation level."""


def _level(name: str):
    import onnxruntime as ort

    return {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[name]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def open_session(
    model: Any,
    make_options: Callable[[], Any],
    *,
    warn: Callable[[str], None] | None = None,
) -> tuple[Any, str]:
    """(session, level name) for ``model`` (bytes or a path) on the CPU provider.

    ``make_options()`` returns fresh SessionOptions (with the extql library
    registered, or not); each attempt sets its optimisation level, starting
    from onnxruntime's default (all).  When a level fails and a lower one
    loads, ``warn`` gets one line naming the levels and onnxruntime's error.
    Raises :class:`SessionError` with the default level's error when no
    level loads (then the model itself is at fault).
    """
    import onnxruntime as ort

    errors: list[tuple[str, BaseException]] = []
    for name in LEVELS:
        options = make_options()
        options.graph_optimization_level = _level(name)
        # A failure comes back as the exception (reported once, in one line):
        # onnxruntime's log would repeat it, and the retry banner it prints on
        # stdout when a session fails to load is of no use on the CPU provider.
        options.log_severity_level = 3
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                session = ort.InferenceSession(model, sess_options=options,
                                               providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
            errors.append((name, exc))
            continue
        if errors and warn is not None:
            failed = ", ".join(n for n, _ in errors)
            warn(
                f"onnxruntime rejects the model at optimisation level(s) {failed} (its graph "
                f"rewrites, e.g. Q/DQ propagation or QGemm fusion, produce nodes it cannot "
                f"run: {_first_line(errors[0][1])}); running at level {name!r} instead"
            )
        return session, name
    raise SessionError(_first_line(errors[0][1]))
