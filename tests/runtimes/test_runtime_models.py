"""Quark's block formats and Quark's own models inlined and run in OpenVINO
(CPU, float32 precision) and tract, as ``extql run --runtime`` runs them.

* The block-format grid (tests/data/blockfmt: every configuration Quark
  writes, with special values) one model per operator and group, each node
  against the NumPy API bit for bit.
* Every model AMD Quark's quantizer wrote (tests/data/quark) against Quark's
  own output, which extql's library gives bit for bit: close, within 5 % of
  the output's range (the runtimes compute the float operators themselves).

Where :data:`extql.tools.runtimes.LIMITS` lists a block family for a
runtime, its cases must be close as the table means it (or, unsupported,
fail to build); a model with a node the table calls wrong or unsupported
there is a strict xfail.  Run by the tox envs ``openvino``
and ``tract`` (see test_other_runtimes.py for ``EXTQL_RUNTIMES``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from blockfmt_contract import family
from blockfmt_data import GRID_CASES, grid_arrays
from blockfmt_paths import NUMPY, block_via, many_node_model

import extql
from extql.tools import runtimes

pytestmark = [pytest.mark.fallback, pytest.mark.usefixtures("kernel_isa")]

QUARK = Path(__file__).resolve().parent.parent / "data" / "quark"
_WANTED = [n for n in os.environ.get("EXTQL_RUNTIMES", "").split(",") if n]
HERE = [name for name in ("openvino", "tract")
        if name in _WANTED or importlib.util.find_spec(name) is not None]


def _same(expected: np.ndarray, got: np.ndarray) -> bool:
    """Bit for bit, any NaN matching any NaN."""
    e, g = np.asarray(expected), np.asarray(got)
    if e.shape != g.shape or e.dtype != g.dtype:
        return False
    bits = np.dtype(f"u{e.dtype.itemsize}")
    nan = np.isnan(e)
    return bool((nan == np.isnan(g)).all()
                and (e[~nan].view(bits) == g[~nan].view(bits)).all())


#: Cases per group: the grid's 1085 cases take OpenVINO minutes to compile;
#: an even sample of each group keeps every configuration kind.
PER_GROUP = 8
_GROUPS = sorted({(c["op_type"], c["group"]) for c in GRID_CASES})
BLOCK_PARAMS = [pytest.param(rt, op, group, id=f"{rt}-{op}-{group}")
                for rt in HERE for op, group in _GROUPS]


def _sample(op_type: str, group: str) -> list[dict]:
    cases = [c for c in GRID_CASES if (c["op_type"], c["group"]) == (op_type, group)]
    return cases[::max(1, len(cases) // PER_GROUP)][:PER_GROUP]


def _close(expected: np.ndarray, got: np.ndarray) -> bool:
    """What LIMITS calls close for a block format: NaN and infinities where
    the NumPy API has them; a finite value equal as a number (a zero of
    either sign), or off by less than 2**-100 (the runtimes flush subnormal
    block scales: such values come out as 0, or OpenVINO's as other tiny
    values), or by a step of the block's grid (a tie rounded the other way:
    at most 2**-3 of the case's largest magnitude for the widths Quark
    writes, BFP's 13 bits the coarsest sampled)."""
    with np.errstate(invalid="ignore"):  # float16 NaN payloads
        e, g = np.asarray(expected, np.float64), np.asarray(got, np.float64)
    if e.shape != g.shape or (np.isnan(e) != np.isnan(g)).any():
        return False
    inf = np.isinf(e)
    if (e[inf] != g[inf]).any() or np.isinf(g[~inf]).any():
        return False
    fin = np.isfinite(e)
    if not fin.any():
        return True
    step = max(2.0**-3 * np.abs(e[fin]).max(), 2.0**-100)
    return bool((np.abs(e[fin] - g[fin]) <= step).all())


@pytest.mark.parametrize(("runtime", "op_type", "group"), BLOCK_PARAMS)
def test_block_grid(runtime, op_type, group):
    """Every node of the group's inlined model gives the NumPy API's bits, or
    is close (or fails to build) where LIMITS says so."""
    cases = _sample(op_type, group)
    model, feeds = many_node_model([(c["op_type"], c["attrs"], grid_arrays(c)[0])
                                    for c in cases])
    inlined = extql.inline_fallbacks(model)
    lim = runtimes.limit_of(runtime, family(op_type).upper())
    if lim is not None and lim.verdict == "unsupported":
        with pytest.raises(runtimes.RuntimeFailure, match="Bfloat16"):
            runtimes.run(inlined, feeds, runtime)
        return
    got = runtimes.run(inlined, feeds, runtime)
    judge = _same if lim is None else _close
    differ = [c["id"] for i, c in enumerate(cases)
              if not judge(block_via(NUMPY, c["op_type"], feeds[f"x{i}"], c["attrs"]),
                           got[f"y{i}"])]
    assert not differ, (f"{len(differ)} of {len(cases)} cases not "
                        f"{'exact' if lim is None else 'close'} in {runtime}: {differ}")


def _not_kept(model: onnx.ModelProto, runtime: str) -> list[str]:
    """The nodes LIMITS calls wrong or unsupported in the runtime."""
    return [n.line() for n in runtimes.node_limits(model, runtime)
            if n.limit.verdict in ("wrong", "unsupported")]


MODEL_PARAMS = []
for _rt in HERE:
    for _path in sorted(QUARK.glob("*.onnx")):
        _why = _not_kept(onnx.load(str(_path), load_external_data=False), _rt)
        _marks = ([pytest.mark.xfail(reason=f"{len(_why)} node(s), e.g. {_why[0]}", strict=True)]
                  if _why else [])
        MODEL_PARAMS.append(pytest.param(_rt, _path.stem, marks=_marks, id=f"{_rt}-{_path.stem}"))


@pytest.mark.parametrize(("runtime", "name"), MODEL_PARAMS)
def test_quark_model_close(runtime, name):
    """The inlined model's output is within 5 % of its range of Quark's."""
    model = onnx.load(str(QUARK / f"{name}.onnx"))
    with np.load(QUARK / f"{name}.quark.npz") as data:
        x, want = data["x"], data["y"]
    got = runtimes.run(extql.inline_fallbacks(model), {model.graph.input[0].name: x}, runtime)
    y = got[model.graph.output[0].name]
    scale = float(np.abs(want).max()) + 1.0
    assert y.shape == want.shape
    assert np.allclose(y, want, atol=0.05 * scale, rtol=0), \
        f"{name} in {runtime}: largest difference {np.abs(y - want).max():.3g} (range {scale:.3g})"


IN_SHAPES = [(2, 3, 5), (1, 4, 8, 8), (1, 2, 3, 4, 5), (3, 7)]


@pytest.mark.parametrize("runtime", HERE)
@pytest.mark.parametrize("shape", IN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_instance_norm(runtime, shape):
    """The DPU instance norm inlined: as LIMITS says (the NumPy API's bits
    where it lists nothing, within a few bfloat16 steps where it says
    close, a build failure where unsupported)."""
    from dpu_models import in_model

    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale, bias = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
    want = extql.extended_instance_normalization(x, scale, bias)
    model = extql.inline_fallbacks(in_model(x_shape=list(shape), c=shape[1],
                                            y_shape=list(shape)))
    feeds = {"x": x, "scale": scale, "B": bias}
    lim = runtimes.limit_of(runtime, "IN")
    if lim is not None and lim.verdict == "unsupported":
        with pytest.raises(runtimes.RuntimeFailure, match="Bfloat16"):
            runtimes.run(model, feeds, runtime)
        return
    got = runtimes.run(model, feeds, runtime)["y"]
    if lim is None:
        assert _same(want, got)
    else:  # a few bfloat16 steps (2**-8 of a magnitude each) of the output's largest
        assert np.allclose(got, want, rtol=0, atol=2.0**-5 * float(np.abs(want).max()))


def _lstm_cases() -> list[tuple[dict, dict, str]]:
    """Every 8th stored Quark LSTM case, the Quark-size one, and three beyond
    Quark (batch 2-3, one direction, layout 1)."""
    from lstm_cases import make_case
    from lstm_data import CASES, inputs

    out = [(dict(c["attrs"]), inputs(c), c["op_type"]) for c in CASES[::8]]
    out += [(dict(c["attrs"]), inputs(c), c["op_type"]) for c in CASES
            if c["group"] == "quark_size"]
    for batch, direction, layout in ((3, "forward", 1), (2, "reverse", 0),
                                     (3, "bidirectional", 1)):
        attrs, feeds = make_case(np.random.default_rng(batch), 7, 9, 6, batch=batch,
                                 direction=direction, layout=layout)
        out.append((attrs, feeds, "ExtendedLSTM"))
    return out


@pytest.mark.parametrize("runtime", HERE)
def test_lstm(runtime):
    """The DPU LSTM inlined: close as LIMITS says, the runtime's Tanh being
    not the C library's tanhf.  Measured on all 76 stored cases and the
    three beyond Quark (OpenVINO 2026.4: 7,953 of 39,018 elements in 27 of
    79 cases, tract 0.23: 8,023 in 22; up to 8 steps each) and on these
    (OpenVINO 7,431 of 24,910, tract 7,524: the Quark-size case is most of
    them); pinned with margins at 40% of the elements and 12 steps, and not
    exact (a runtime whose Tanh became tanhf's would fail here until LIMITS
    says so)."""
    from dpu_models import lstm_model

    lim = runtimes.limit_of(runtime, "LSTM")
    assert lim is not None and lim.verdict == "close"
    diff = total = 0
    worst = 0.0
    for attrs, feeds, op in _lstm_cases():
        model = extql.inline_fallbacks(lstm_model(
            attrs, op=op, x_shape=list(feeds["X"].shape), w_shape=list(feeds["W"].shape),
            r_shape=list(feeds["R"].shape), b_shape=list(feeds["B"].shape)))
        want = extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds["B"], **attrs)
        got = runtimes.run(model, feeds, runtime)["Y"]
        assert got.shape == want.shape and got.dtype == want.dtype
        n = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        diff, total = diff + n, total + want.size
        if n:
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want)))
                        / attrs["y_scale"])
    assert 0 < diff <= 0.4 * total, f"{diff} of {total} elements differ"
    assert worst <= 12, f"up to {worst} steps"
