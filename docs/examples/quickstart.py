import numpy as np, onnx, onnxruntime as ort, extql
from onnx import TensorProto, helper

# One ExtendedQuantizeLinear node: float32 x -> int16 y, scale 0.01, zero point 0.
node = helper.make_node("ExtendedQuantizeLinear", ["x", "scale", "zp"], ["y"], domain=extql.DOMAIN)
graph = helper.make_graph(
    [node], "quantize",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
    [helper.make_tensor_value_info("y", TensorProto.INT16, [None])],
    [onnx.numpy_helper.from_array(np.array(0.01, np.float32), "scale"),
     onnx.numpy_helper.from_array(np.array(0, np.int16), "zp")])
model = helper.make_model(graph, ir_version=8, opset_imports=[
    helper.make_opsetid("", 17), helper.make_opsetid(extql.DOMAIN, 1)])

session = ort.InferenceSession(model.SerializeToString(), extql.register(ort.SessionOptions()))
x = np.linspace(-400, 400, 9, dtype=np.float32)
print(session.run(None, {"x": x})[0])  # [-32768 -30000 -20000 -10000 0 10000 20000 30000 32767]
