"""The benchmark harness of extql: ``extql bench``.

A top-level package of its own, installed with extql (the wheel carries it
beside the ``extql`` package, which holds no benchmark code) so that
``extql bench`` runs from an installed package.  Only the copy anchor needs a
source checkout (``benchmarks/copy_ops``, see :mod:`.copy_library`): without
one the onnxruntime table leaves its copy column out and says so.

Five tables, each a list of MEDIAN time ratios ``extql / anchor`` (below 1:
extql is faster), measured side by side in one process on the same
tensors, interleaved, so that noise from other work on the machine hits all
contenders alike:

``ort``
    extql's native op in an onnxruntime session against onnxruntime's own
    QuantizeLinear / DequantizeLinear or Cast, and against the copy kernel
    (``copy%``: the share of the memory bandwidth extql reaches).
``numpy``
    ``extql.quantize_linear`` / ``dequantize_linear`` against the NumPy
    expression of the same formula.
``fallback``
    The native op against the same model through the fallback functions.
``blocks``
    Quark's block formats (BFP16, MX9, MX6, MXINT8, MXFP8, MXFP4) in an
    onnxruntime session, on an NCHW activation and a MatMul input, against
    the same model inlined to standard ops (``extql.inline_fallbacks``, no
    library) and the copy kernel (``copy%``).
``dpu``
    Quark's DPU-emulation ops (ExtendedInstanceNormalization, ExtendedLSTM)
    in an onnxruntime session and through the NumPy API, against
    onnxruntime's own float InstanceNormalization / LSTM on the same shapes
    (Quark's CNN norms, its LSTM size); Quark's own library is measured
    against by ``benchmarks/dpu_ops.py``.

The modules, by concern:

==================  ==========================================================
``config``          what to measure (sizes, types, granularities, threads)
``data``            shapes, inputs, scales and zero points
``timing``          interleaved median timing
``models``          one-node models, sessions and IOBinding runners
``copy_library``    builds the copy anchor's custom-op library
``anchors``         the anchor of each row, NumPy expressions, fallbacks
``runner``          the tables, the exactness checks, the fallback sessions
``blocks``          the block formats' table
``dpu``             the DPU-emulation ops' table
``machine``         what the figures depend on (CPU, cores, versions)
``targets``         the targets, checked on the measured rows
``report``          the tables, the report and the Markdown document
``cli``             the command line (``extql bench``, ``python -m extql_bench``)
==================  ==========================================================

Nothing here is asserted: the tables are for people (and ``--json`` for
scripts); ``tests/packaging/test_bench.py`` checks that the harness runs and reports.
"""
