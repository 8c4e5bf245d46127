"""The onnx layer: what works on ONNX models and onnxscript functions.

It sits on the NumPy API and under the graph passes (:mod:`extql.tools`) and
the command (:mod:`extql.cli`); it imports nothing from them.  One module per
concern:

* :mod:`~extql.onnx.graph` -- finding the Extended (and com.microsoft) Q/DQ
  nodes, the subgraph walk, static types, fresh names, tensors;
* :mod:`~extql.onnx.check` -- the static checks of one node;
* :mod:`~extql.onnx.microsoft` -- onnxruntime's com.microsoft Q/DQ, and
  custom operators nobody implements;
* :mod:`~extql.onnx.eager` -- eager onnxscript evaluation on the kernels;
* :mod:`~extql.onnx.script_export` -- models from onnxscript functions that
  use extql's operators.

Its public modules are :mod:`extql.fallbacks`, :mod:`extql.reference` and
:mod:`extql.opset` (``extql.quark``).  They need onnx; ``import extql`` does
not load them.
"""
