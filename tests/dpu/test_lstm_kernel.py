"""ExtendedLSTM's kernels through the NumPy API (extql.extended_lstm).

* AMD Quark 0.13's own library's bits on every stored case
  (tests/data/dpu/lstm.*), and the oracle's Y_h / Y_c there;
* any node the contract defines, drawn by hypothesis, against the oracle
  (tests/lstm_contract.py): Y, Y_h and Y_c bit for bit, refusals where the
  oracle refuses;
* beyond Quark: batch > 1 equals batch-1 runs element by element, direction
  forward / reverse equal the halves of bidirectional with sliced weights,
  layout 1 equals layout 0 transposed, seq 0, any split of the work items
  and any thread count give the same bits.
"""

from __future__ import annotations

import lstm_contract as lc
import numpy as np
import pytest
from contract import assert_same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lstm_cases import make_case
from lstm_data import CASES, contract_inputs, quark_y

import extql
from extql import _kernels

pytestmark = pytest.mark.usefixtures("kernel_isa")

ALL = "Y,Y_h,Y_c"


def run(attrs, feeds, outputs=ALL, b=True):
    return extql.extended_lstm(feeds["X"], feeds["W"], feeds["R"], feeds["B"] if b else None,
                               outputs=outputs, **attrs)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_quarks_bits(case):
    feeds = contract_inputs(case)
    y = run(case["attrs"], feeds, "Y")
    assert_same_bits(y, quark_y(case), f"{case['id']} {case['group']}")
    if case["group"] != "quark_size":  # (the oracle takes seconds there)
        want = lc.expected(case["attrs"], feeds["X"], feeds["W"], feeds["R"], feeds["B"])
        got = run(case["attrs"], feeds)
        for g, exp, name in zip(got, want, ("Y", "Y_h", "Y_c"), strict=True):
            assert_same_bits(g, exp, f"{case['id']} {name}")


@st.composite
def cases(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    seq, batch = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    n_in, hidden = draw(st.integers(1, 9)), draw(st.integers(1, 6))
    direction = draw(st.sampled_from(sorted(lc.DIRECTIONS)))
    kw = {"symmetric": draw(st.booleans()), "batch": batch, "direction": direction,
          "layout": draw(st.integers(0, 1)), "specials": draw(st.booleans()),
          "saturate": draw(st.booleans()), "grid_weights": draw(st.booleans())}
    if draw(st.booleans()):
        kw["y_scale"] = draw(st.sampled_from([2.0**-15, 1.0 / 65535, 3.1e-5, 1.7e-4, 2e-3,
                                              0.02, 1e-6]))
    if draw(st.booleans()):
        kw["y_zero_point"] = draw(st.integers(0, 65535))
    return make_case(rng, seq, n_in, hidden, **kw)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
def test_any_node_against_the_oracle(case):
    attrs, feeds = case
    bad = lc.problems(attrs, feeds["X"].shape, feeds["W"].shape, feeds["R"].shape,
                      feeds["B"].shape)
    if bad:
        with pytest.raises(ValueError, match="ExtendedLSTM"):
            run(attrs, feeds)
        return
    want = lc.expected(attrs, feeds["X"], feeds["W"], feeds["R"], feeds["B"])
    for got, exp, name in zip(run(attrs, feeds), want, ("Y", "Y_h", "Y_c"), strict=True):
        assert_same_bits(got, exp, name)


def _case(seed=3, **kw):
    return make_case(np.random.default_rng(seed), kw.pop("seq", 7), kw.pop("n_in", 11),
                     kw.pop("hidden", 9), **kw)


def test_batch_is_each_element_alone():
    attrs, feeds = _case(batch=3, symmetric=False)
    whole = run(attrs, feeds)
    for n in range(3):
        one = dict(feeds, X=np.ascontiguousarray(feeds["X"][:, n:n + 1]))
        y, y_h, y_c = run(attrs, one)
        assert_same_bits(whole[0][:, :, n:n + 1], y, f"Y of element {n}")
        assert_same_bits(whole[1][:, n:n + 1], y_h, f"Y_h of element {n}")
        assert_same_bits(whole[2][:, n:n + 1], y_c, f"Y_c of element {n}")


@pytest.mark.parametrize("layout", [0, 1])
def test_one_direction_is_that_half_of_bidirectional(layout):
    attrs, feeds = _case(batch=2, layout=layout, seed=5)
    both = run(attrs, feeds)
    for d, direction in enumerate(("forward", "reverse")):
        half = {k: np.ascontiguousarray(v[d:d + 1]) for k, v in feeds.items() if k != "X"}
        got = run(dict(attrs, direction=direction), dict(half, X=feeds["X"]))
        ys = both[0][:, :, d:d + 1] if layout == 1 else both[0][:, d:d + 1]
        assert_same_bits(got[0], ys, f"Y {direction}")
        hs = (slice(None), slice(d, d + 1)) if layout == 1 else (slice(d, d + 1),)
        assert_same_bits(got[1], both[1][hs], f"Y_h {direction}")
        assert_same_bits(got[2], both[2][hs], f"Y_c {direction}")


def test_layout_one_is_layout_zero_transposed():
    attrs, feeds = _case(batch=3, seed=8)
    y0, h0, c0 = run(attrs, feeds)
    x1 = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
    y1, h1, c1 = run(dict(attrs, layout=1), dict(feeds, X=x1))
    assert_same_bits(y1, y0.transpose(2, 0, 1, 3), "Y")
    assert_same_bits(h1, h0.transpose(1, 0, 2), "Y_h")
    assert_same_bits(c1, c0.transpose(1, 0, 2), "Y_c")


def test_no_bias_is_zeros_and_outputs_any_subset():
    attrs, feeds = _case(seed=9)
    zero = dict(feeds, B=np.zeros_like(feeds["B"]))
    assert_same_bits(run(attrs, feeds, "Y", b=False), run(attrs, zero, "Y"), "no B")
    y, y_h, y_c = run(attrs, feeds)
    got_c, got_y = run(attrs, feeds, "Y_c,Y")
    assert_same_bits(got_c, y_c, "Y_c")
    assert_same_bits(got_y, y, "Y")
    assert_same_bits(run(attrs, feeds, "Y_h")[0], y_h, "Y_h alone")


def test_empty_sequence_starts_h_and_c():
    attrs, feeds = _case(seed=4, y_zero_point=30000)
    feeds = dict(feeds, X=np.zeros((0, 2, feeds["X"].shape[2]), np.float32))
    y, y_h, y_c = run(attrs, feeds)
    want = lc.expected(attrs, feeds["X"], feeds["W"], feeds["R"], feeds["B"])
    assert y.shape == (0, 2, 2, attrs["hidden_size"])
    assert_same_bits(y_h, want[1], "Y_h")
    assert_same_bits(y_c, want[2], "Y_c")
    assert np.all(y_c == 0) and np.all(y_h == y_h.flat[0])  # h = ohz, c = 0


def test_splits_and_threads_give_the_same_bits():
    attrs, feeds = _case(batch=4, seq=5, n_in=40, hidden=33, seed=11)
    a = extql.rules.lstm.check_lstm(attrs)
    serial = run(attrs, feeds)
    old = extql.get_num_threads()
    try:
        for threads in (1, 2, 3):
            extql.set_num_threads(threads)
            for got, want, name in zip(run(attrs, feeds), serial, ("Y", "Y_h", "Y_c"), strict=True):
                assert_same_bits(got, want, f"{name} on {threads} threads")
    finally:
        extql.set_num_threads(old)
    seq, batch, n_in = feeds["X"].shape
    outs = [np.empty(np.shape(v), np.float32) for v in serial]
    for splits in ([0, 8], [0, 1, 2, 3, 8], [0, 5, 5, 8]):
        for o in outs:
            o.fill(np.nan)
        _kernels.lstm_run(a.scales, a.zero_points, n_in, a.hidden_size, a.dirs, a.reverse,
                          feeds["W"].reshape(-1), feeds["R"].reshape(-1),
                          feeds["B"].reshape(-1), feeds["X"].reshape(-1),
                          *(o.reshape(-1) for o in outs), seq, batch, 0, splits=splits)
        for got, want in zip(outs, serial, strict=True):
            assert_same_bits(got, want, f"splits {splits}")
