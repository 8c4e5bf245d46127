"""The ExtendedLSTM oracle's helpers (tests/lstm_contract.py) against the
operator page's own statements (docs/operators/extended_lstm.rst): the
rounding shifts, the 16-bit bound of 2^16 with its wrap, the fixed-point
factors with their quirks, the output rescale, the quantization's special
values and the refusals."""

from __future__ import annotations

import lstm_contract as lc
import numpy as np
import pytest


@pytest.mark.parametrize(("v", "k", "want"), [
    (3, 1, 2), (-3, 1, -2), (5, 2, 1), (6, 2, 2), (-6, 2, -2), (7, 0, 7), (-1, 1, -1),
    (2**40, 1, 2**31 - 1), (-(2**40), 1, -(2**31)),
    # k = 32: Quark's 1 << 31 is the int -2^31, so 0 rounds to -1
    (0, 32, -1), (2**33, 32, 1), (-(2**33), 32, -1),
])
def test_srs(v, k, want):
    assert lc.srs(v, k) == want


def test_srs16_bound_is_two_to_the_sixteen_then_wraps():
    assert lc.srs16(40000, 0) == 40000 - 65536
    assert lc.srs16(10**9, 0) == -1          # clamped to 65535, wrapped
    assert lc.srs16(-(10**9), 0) == 0         # clamped to -65536, wrapped
    assert lc.srs16(-32769, 0) == 32767


def test_round_half_away_from_zero():
    assert [lc.round32(d) for d in (0.5, -0.5, 1.49, -2.5, 3e10, -3e10)] == \
        [1, -1, 1, -3, 2**31 - 1, -(2**31)]
    assert lc.round16(32768.0) == -32768 and lc.round16(-70000.0) == 0


def test_fix():
    assert lc.fix(0.0) == (0, 0)
    assert lc.fix(0.75) == (24576, 15)        # 2^15 * 0.75
    assert lc.fix(2.0**-3) == (-32768, 18)    # 2^15 wraps to int16
    q, a = lc.fix(-3.3)
    assert a == 13 and q == round(-3.3 * 2**13)
    q, a = lc.fix(0.8 * 2.0**-16)             # a = 31: Quark's 1 << 31 is -2^31
    assert a == 31 and q == -round(0.8 * 2**15)


def test_output_rescale_and_zero_point_offset():
    attrs = {"hidden_size": 1, **{f"{p}_scale": 1e-3 for p in lc.QPARAMS},
             **{f"{p}_zero_point": 32768 for p in lc.QPARAMS}}
    attrs.update(x_scale=1e-4, w_scale=1e-5, r_scale=1e-5, y_scale=2.0**-15)
    p = lc.params(attrs, 8, 4)
    assert (p.ohs, p.oh, p.ohz) == (65535, 25, 0)  # 2^16 clamps to 65535
    attrs["y_zero_point"] = 32768 - 5
    assert lc.params(attrs, 8, 4).ohz == -4          # yz + 1 below 32768
    attrs["y_zero_point"] = 32768 + 5
    assert lc.params(attrs, 8, 4).ohz == 5


def test_quantization_special_values():
    q = lc.quantize_u16_i16(np.array([np.nan, np.inf, -np.inf, 0.5, 1.5, -0.0], np.float32),
                            1.0, 32768)
    assert q.tolist() == [-32768, 32767, -32768, 0, 2, 0]


def _attrs(**kw):
    a = {"hidden_size": 4, **{f"{p}_scale": 1e-4 for p in lc.QPARAMS},
         **{f"{p}_zero_point": 32768 for p in lc.QPARAMS}, "y_scale": 3e-5}
    a.update(kw)
    return a


@pytest.mark.parametrize(("change", "word"), [
    ({"hidden_size": 0}, "hidden_size"), ({"x_scale": 0.0}, "x_scale"),
    ({"y_scale": float("nan")}, "y_scale"), ({"w_zero_point": 65536}, "w_zero_point"),
    ({"direction": "both"}, "direction"), ({"layout": 2}, "layout"),
    ({"input_forget": 1}, "input_forget"), ({"y_scale": 0.05}, "oh"),
    ({"x_scale": 0.5, "w_scale": 0.5}, "ax"), ({"x_scale": 1e-7, "w_scale": 1e-7}, "ax"),
])
def test_refusals(change, word):
    bad = lc.problems(_attrs(**change), (3, 1, 8), (2, 16, 8), (2, 16, 4), (2, 32))
    assert bad and word in " ".join(bad)


def test_shape_refusals():
    a = _attrs()
    assert lc.problems(a, (3, 1, 8), (2, 16, 8), (2, 16, 4), (2, 32)) == []
    assert lc.problems(a, (3, 8), (2, 16, 8), (2, 16, 4)) == ["X rank"]
    assert lc.problems(a, (3, 1, 8), (1, 16, 8), (2, 16, 4)) == ["W shape"]
    assert lc.problems(a, (3, 1, 8), (2, 16, 8), (2, 16, 5)) == ["R shape"]
    assert lc.problems(a, (3, 1, 8), (2, 16, 8), (2, 16, 4), (2, 16)) == ["B shape"]
    assert lc.problems({**a, "direction": "forward"}, (3, 1, 8), (1, 16, 8), (1, 16, 4)) == []
