"""The rules of Quark's DPU-emulation operators, written once: the operator
names and domains, and the checks of ExtendedInstanceNormalization's inputs
(docs/operators/extended_instance_normalization.rst) with their messages.
The NumPy API raises them; the tools report them."""

from __future__ import annotations

from .types import DOMAIN, LEGACY_DOMAIN

#: The instance norm's names: op_type -> domain (both compute the same).
IN_OPS: dict[str, str] = {"ExtendedInstanceNormalization": DOMAIN,
                          "VitisInstanceNormalization": LEGACY_DOMAIN}
IN_OP = "ExtendedInstanceNormalization"
#: epsilon's default (as Quark's kernel and ONNX's InstanceNormalization).
DEFAULT_EPSILON = 1e-5


def in_problems(op: str, types: tuple[str, str, str], x_shape: tuple[int, ...] | None,
                scale_shape: tuple[int, ...] | None,
                bias_shape: tuple[int, ...] | None) -> list[str]:
    """Every refusal of an instance norm's inputs (element type names as
    NumPy spells them; a shape of None: unknown, not checked)."""
    out = []
    for name, t in zip(("x", "scale", "B"), types, strict=True):
        if t != "float32":
            out.append(f"{op}: {name} must be float32, got {t}")
    if x_shape is None:
        return out
    if len(x_shape) < 2:
        out.append(f"{op}: x must have rank >= 2 (N, C, ...), got rank {len(x_shape)}")
        return out
    c = x_shape[1]
    for name, shape in (("scale", scale_shape), ("B", bias_shape)):
        if shape is not None and tuple(shape) != (c,):
            out.append(f"{op}: {name} must be 1-D of length C = {c} (x's dimension 1), "
                       f"got shape {list(shape)}")
    return out
