"""The oracle of the block formats (tests/blockfmt_contract.py) against every
BFP / MX node of the models AMD Quark 0.13's own quantizer wrote
(tests/data/quark, made by tools/make_quark_fixtures.py): each node's input
and output in a run with Quark's library are stored beside the model, and
the oracle must give that output bit for bit.  The nodes' attributes are
the ones the contract says Quark writes for each configuration.
"""

from __future__ import annotations

import blockfmt_contract as bc
import numpy as np
import onnx
import pytest
from blockfmt_data import BLOCK_MODELS, block_nodes, model_values
from contract import assert_same_bits

MODELS = BLOCK_MODELS


def test_every_configuration_is_there():
    stems = {m.split("_", 1)[1] for m in MODELS}
    for config in ("bfp16", "mx4", "mx6", "mx9", "mxfp8e5m2", "mxfp8e4m3", "mxfp6e3m2",
                   "mxfp6e2m3", "mxfp4e2m1", "mxint8"):
        assert {config, f"{config}_qc"} <= stems
    assert {"bf16_bfp16", "bf16_mxint8", "mx9_int8"} <= stems
    for stem in stems:
        assert {f"cnn_{stem}", f"transformer_{stem}"} <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_every_node_gives_quarks_bits(name):
    stored = model_values(name)
    count = 0
    for model, node, attrs in block_nodes(name):
        x = stored[f"node_in__{node.name}"]
        assert x.dtype == np.float32
        y = bc.expected(node.op_type, x, attrs)
        assert_same_bits(y, stored[f"node_out__{node.name}"], f"{name}: {node.name} {attrs}")
        if node.output[0] == model.graph.output[0].name:  # the same run as "y"
            assert_same_bits(stored["y"], stored[f"node_out__{node.name}"], name)
        count += 1
    assert count >= 4


def _expected_attributes(name: str) -> dict[str, object]:
    """What the contract says Quark writes for the model's configuration."""
    config = name.split("_", 1)[1]
    base = config.removesuffix("_qc")
    if base in ("bfp16", "bf16_bfp16"):
        return {"bfp_method": "to_bfp", "bit_width": 16, "block_size": 8,
                "rounding_mode": 0 if config.endswith("_qc") else 2}
    if base in ("mx4", "mx6", "mx9", "mx9_int8"):
        width = {"mx4": 11, "mx6": 13, "mx9": 16, "mx9_int8": 16}[base]
        return {"bfp_method": "to_bfp_prime", "bit_width": width, "block_size": 16,
                "sub_block_size": 2, "sub_block_shift_bits": 1, "rounding_mode": 2}
    # mxint8 -> int8, mxfp8e5m2 -> fp8_e5m2, ...
    element = "int8" if base.endswith("mxint8") else f"fp{base[4]}_{base[5:]}"
    return {"element_dtype": element, "block_size": 32, "rounding_mode": 2}


@pytest.mark.parametrize("name", MODELS)
def test_nodes_are_written_as_the_contract_says(name):
    want = _expected_attributes(name)
    for model, node, attrs in block_nodes(name):
        assert node.domain == "com.amd.quark" and node.name.endswith("_DequantizeLinear")
        for key, value in want.items():
            assert attrs.get(key) == value, (name, node.name, key, attrs)
        if node.op_type == "BFPQuantizeDequantize":  # every attribute spelled out but one
            assert set(attrs) == set(bc.BFP_DEFAULTS) - {"use_compiler_version_cpu_kernel"}
        inits = {i.name: i for i in model.graph.initializer}
        source = inits.get(node.input[0])
        if source is not None:  # a weight: stays float32, rank 1 (biases) on axis 0
            assert source.data_type == onnx.TensorProto.FLOAT
            assert attrs["axis"] == (0 if len(source.dims) == 1 else attrs["axis"])
