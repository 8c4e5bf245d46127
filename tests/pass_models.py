"""Models of several Extended Q -> DQ chains and how their outputs are
judged, shared by the graph-pass, native and command tests.

The expectation is the contract's (tests/contract.py), independent of extql.
"""

from __future__ import annotations

import numpy as np
from contract import TYPES, assert_same_bits, dequantize, quantize
from fallback_cases import random_scale, special_x, zero_points
from onnx import TensorProto, helper
from onnx_helpers import DOMAIN, NAMES, ONNX_OF, make_model, tensor, value_info

ALL = list(TYPES)


def mixed_model(types, *, opset=21, domain=DOMAIN, shape=(2, 3, 4)):
    """One Q->DQ chain per entry of ``types`` (None: no zero point) from the same x,
    alternating per-axis and per-tensor; returns (model, expectation function)."""
    qname, dqname = NAMES[domain]
    rng = np.random.default_rng(len(types))
    nodes, inits, outs, params = [], [], [], []
    for i, t in enumerate(types):
        per_axis = i % 2 == 0
        scale = np.asarray(random_scale((shape[1],) if per_axis else None, rng), np.float32)
        zp = None if t is None else zero_points(t, shape[1] if per_axis else None, rng)
        inits.append(tensor(f"s{i}", scale))
        zin = []
        if zp is not None:
            inits.append(tensor(f"zp{i}", zp))
            zin = [f"zp{i}"]
        nodes.append(helper.make_node(qname, ["x", f"s{i}", *zin], [f"q{i}"], domain=domain,
                                      name=f"Q{i}"))
        nodes.append(helper.make_node(dqname, [f"q{i}", f"s{i}", *zin], [f"d{i}"],
                                      domain=domain, name=f"DQ{i}", axis=1))
        qt = ONNX_OF[t] if t else TensorProto.UINT8
        outs += [value_info(f"q{i}", qt, shape), value_info(f"d{i}", TensorProto.FLOAT, shape)]
        params.append((scale, zp))
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, shape)], outs, inits,
                       opset=opset, domains=(domain,))

    def expected(x):
        out = {}
        for i, (scale, zp) in enumerate(params):
            q = quantize(x, scale, zp, axis=1)
            out[f"q{i}"] = q
            out[f"d{i}"] = dequantize(q, scale, zp, axis=1)
        return out

    return model, expected


def assert_outputs(got, expected, what):
    assert set(got) == set(expected), what
    for name in expected:
        assert_same_bits(got[name], expected[name], f"{what}: {name}")


X = special_x((2, 3, 4), np.random.default_rng(7), "int16")


def canonical_nans(x: np.ndarray) -> np.ndarray:
    """x with every NaN replaced by the payload-free quiet NaN of its sign.

    For the paths computed by the extql kernels (reference.OPS): the kernels
    keep the top payload bits of a NaN when quantizing to bfloat16 (see
    test_reference_ops_bfloat16_nan_payload), so payload NaNs are tested there
    only."""
    bits = x.view(np.uint32).copy()
    nan = np.isnan(x)
    bits[nan] = (bits[nan] & 0x80000000) | 0x7FC00000
    return bits.view(np.float32)


X_KERNEL = canonical_nans(X)
