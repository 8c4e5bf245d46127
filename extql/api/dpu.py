"""The NumPy API of Quark's DPU-emulation operators: ExtendedInstanceNormalization.

The DPU's instance norm in bfloat16 arithmetic with its own variance
formula, bit for bit as Quark 0.13's kernel
(docs/operators/extended_instance_normalization.rst).  The inputs are
checked by :mod:`extql.rules.dpu` (the same checks as the onnxruntime
library's and ``extql check``'s), then the kernels run, instances in
parallel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _kernels
from ..rules.dpu import DEFAULT_EPSILON, IN_OP, in_problems

__all__ = ["extended_instance_normalization"]


def _array(name: str, v: Any) -> np.ndarray:
    if isinstance(v, (np.ndarray, np.generic)) or hasattr(v, "dtype"):
        return np.asarray(v)
    try:
        return np.asarray(v, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{IN_OP}: {name} must be float32 numbers: {exc}") from None


def extended_instance_normalization(x: Any, scale: Any, bias: Any, *,
                                    epsilon: float = DEFAULT_EPSILON) -> np.ndarray:
    """Quark's DPU instance norm of ``x`` (float32, [N, C, ...], rank >= 2)
    with γ = ``scale`` and β = ``bias`` (float32, [C]): a new float32 array
    of x's shape whose values are all bfloat16 values.

    Raises TypeError for an input that is not float32 and ValueError for a
    rank below 2 or a γ / β that is not 1-D of length C, naming the operator.
    """
    arrays = [_array(n, v) for n, v in (("x", x), ("scale", scale), ("B", bias))]
    # (a dtype's name costs microseconds: only a type that is not float32 is named)
    problems = in_problems(IN_OP, tuple("float32" if a.dtype == np.float32 else str(a.dtype)
                                        for a in arrays),
                           *(a.shape for a in arrays))
    if problems:
        kind = TypeError if "must be float32" in problems[0] else ValueError
        raise kind("; ".join(problems))
    try:
        eps = np.float32(epsilon)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{IN_OP}: epsilon must be a float: {exc}") from None
    xa, g, b = (np.ascontiguousarray(a) for a in arrays)
    y = np.empty(xa.shape, dtype=np.float32)
    c = xa.shape[1]
    s = math.prod(xa.shape[2:])
    if xa.size:
        _kernels.dpu_instance_norm(xa.reshape(-1), g, b, y.reshape(-1), c, s, float(eps))
    return y
