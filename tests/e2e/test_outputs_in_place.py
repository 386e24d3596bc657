"""Results that reach a graph output through reshapes are computed in the
output buffer (flowc-write-outputs-in-place), not in a buffer of their own
copied there at the end: an LLM decode step's updated KV cache, a product
reshaped into heads. The outputs stay onnxruntime's, with the pass and
without it, including where the copy has to stay (an input returned
reshaped, two outputs viewing one result)."""
import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from conftest import onnxruntime_outputs, save

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def shape(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def kv_and_heads_model():
    """present = ScatterND(past, at, new) (a KV cache update at a run-time
    row); heads = MatMul(x, w) reshaped into [2, 4, 16] and also read by
    the next node; relu viewed as two outputs of different shapes; the
    input x returned reshaped; out = heads + 1."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w")
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    nodes = [
        helper.make_node("ScatterND", ["past", "at", "new"], ["present"]),
        helper.make_node("MatMul", ["x", "w"], ["product"]),
        helper.make_node("Reshape", ["product", "heads_shape"], ["heads"]),
        helper.make_node("Add", ["heads", "one"], ["out"]),
        helper.make_node("Relu", ["product"], ["relu"]),
        helper.make_node("Reshape", ["relu", "flat_shape"], ["relu_flat"]),
        helper.make_node("Reshape", ["relu", "square_shape"], ["relu_square"]),
        helper.make_node("Reshape", ["x", "flat_x_shape"], ["x_flat"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("past", FLOAT, [1, 4, 64, 16]),
         helper.make_tensor_value_info("at", INT64, [1, 4, 1, 3]),
         helper.make_tensor_value_info("new", FLOAT, [1, 4, 1, 16]),
         helper.make_tensor_value_info("x", FLOAT, [2, 32])],
        [helper.make_tensor_value_info("present", FLOAT, [1, 4, 64, 16]),
         helper.make_tensor_value_info("heads", FLOAT, [2, 4, 16]),
         helper.make_tensor_value_info("out", FLOAT, [2, 4, 16]),
         helper.make_tensor_value_info("relu_flat", FLOAT, [128]),
         helper.make_tensor_value_info("relu_square", FLOAT, [8, 16]),
         helper.make_tensor_value_info("x_flat", FLOAT, [64])],
        [w, one, shape("heads_shape", [2, 4, 16]), shape("flat_shape", [128]),
         shape("square_shape", [8, 16]), shape("flat_x_shape", [64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=8)


def feeds():
    rng = np.random.default_rng(4)
    return {"past": rng.standard_normal((1, 4, 64, 16)).astype(np.float32),
            "at": np.array([[[[0, h, 37 - h]] for h in range(4)]], np.int64),
            "new": rng.standard_normal((1, 4, 1, 16)).astype(np.float32),
            "x": rng.standard_normal((2, 32)).astype(np.float32)}


def profiled_calls(flowc, artifact, inputs):
    report = json.loads(flowc.run("run", artifact, *flowc.input_args(artifact, inputs),
                                  "--profile", "--json").stdout)
    return report["profile"]["calls"]


def output_copies(flowc, artifact, inputs):
    """Kernel calls of one run that belong to no node: copies into outputs."""
    return [call for call in profiled_calls(flowc, artifact, inputs) if not call["nodes"]]


def test_results_are_written_into_their_outputs(flowc, tmp_path):
    model = save(kv_and_heads_model(), tmp_path / "kv.onnx")
    inputs = feeds()
    expected = onnxruntime_outputs(model, inputs)
    in_place, copied = tmp_path / "in_place.fca", tmp_path / "copied.fca"
    flowc.submit(model, in_place)
    flowc.submit(model, copied, "--disable-pass", "flowc-write-outputs-in-place")
    for artifact in (in_place, copied):
        outputs = flowc.execute(artifact, inputs)
        for name, value in expected.items():
            np.testing.assert_allclose(outputs[name], value, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{artifact.name}: {name}")
    # Without the pass the scatter's and the product's results, and relu's
    # two views, are copied into their outputs. With it only one of relu's
    # views and the reshaped input are: neither has a buffer of its own to
    # compute into.
    assert len(output_copies(flowc, copied, inputs)) == 5
    assert len(output_copies(flowc, in_place, inputs)) == 2
    # The profile's bytes are the call's own buffers: the scatter kernel is
    # passed the past cache [256, 16] floats, the updates [4, 16], four
    # int32 targets and its result [256, 16], wherever that result lies.
    for artifact in (in_place, copied):
        scatter = next(call for call in profiled_calls(flowc, artifact, inputs)
                       if call["kind"] == "scatter")
        assert scatter["bytes"] == 4 * (256 * 16 + 4 * 16 + 4 + 256 * 16)
