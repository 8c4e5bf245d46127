"""The onnx layer: what works on ONNX models and onnxscript functions.

It sits on the NumPy API and under the graph passes (:mod:`extql.tools`) and
the command (:mod:`extql.cli`), and imports nothing from them.  One module per
concern:

* :mod:`~extql.onnx.graph` -- finding the Extended (and com.microsoft) Q/DQ
  nodes, the subgraph walk, static types, fresh names, tensors;
* :mod:`~extql.onnx.check` -- the static checks of one node;
* :mod:`~extql.onnx.microsoft` -- onnxruntime's com.microsoft Q/DQ, and
  custom operators nobody implements;
* :mod:`~extql.onnx.schemas` -- the operators' ONNX schemas (from
  :mod:`extql.rules`), registered with onnx;
* the fallback functions' onnxscript source, by concern:
  :mod:`~extql.onnx.fallback_plan` (granularity at run time),
  :mod:`~extql.onnx.fallback_arith` (the division in its precision, signed
  zeros), :mod:`~extql.onnx.fallback_cores` (each type's route),
  :mod:`~extql.onnx.fallback_functions` (the operator functions of each
  variant), :mod:`~extql.onnx.fallback_dispatch` (the type-generic ones);
  :mod:`~extql.onnx.fallback_protos` flattens and names them for models,
  :mod:`~extql.onnx.fallback_scripts` makes them callable from script
  functions; :mod:`~extql.onnx.variants` names the variants (without
  onnxscript);
* :mod:`~extql.onnx.eager` -- eager onnxscript evaluation on the kernels;
* :mod:`~extql.onnx.script_export` -- models from onnxscript functions that
  use extql's operators (:func:`extql.to_model_proto`).

Its public modules are :mod:`extql.fallbacks`, :mod:`extql.reference` and
:mod:`extql.opset` (``extql.quark``).  They need onnx; ``import extql`` does
not load them.
"""
