"""Opsets 11 to 21: models written at opset 11, where Squeeze, Unsqueeze,
ReduceMean, Split and Clip still took attributes and Softmax flattened its
input, converted upwards by ONNX's own version converter (which moves
attributes to inputs and rewrites Softmax), compiled and compared with
onnxruntime at every opset."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

import make_models
from conftest import assert_close, onnxruntime_outputs, save

OPSETS = list(range(11, 22))


def opset_sensitive_model(rng) -> onnx.ModelProto:
    """x[2,3,4] through the ops whose signatures changed between 11 and 21."""
    weight = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    low = numpy_helper.from_array(np.array(-0.5, np.float32), "low")
    high = numpy_helper.from_array(np.array(0.75, np.float32), "high")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Unsqueeze", ["m"], ["u"], axes=[0]),
        helper.make_node("Squeeze", ["u"], ["s"], axes=[0]),
        helper.make_node("ReduceMean", ["s"], ["mean"], axes=[2], keepdims=1),
        helper.make_node("Sub", ["s", "mean"], ["centered"]),
        helper.make_node("Clip", ["centered", "low", "high"], ["clipped"]),
        helper.make_node("Split", ["clipped"], ["a", "b"], axis=1, split=[1, 2]),
        # Opset 11 Softmax normalizes over the flattened axes 1.. of b.
        helper.make_node("Softmax", ["b"], ["p"], axis=1),
        helper.make_node("Concat", ["a", "p"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "opset_sensitive",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        [weight, low, high])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)],
                             ir_version=6)


def at_opset_11(model: onnx.ModelProto) -> onnx.ModelProto:
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 11))
    model.ir_version = 6
    return model


def models(rng):
    return {
        "opset_sensitive": (opset_sensitive_model(rng),
                            {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)}),
        # The example CNN uses no op whose signature changed, so it is valid
        # at opset 11 as written.
        "cnn": (at_opset_11(make_models.make_cnn(rng)),
                {"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}),
    }


@pytest.mark.parametrize("opset", OPSETS)
def test_opset_converted_models_match_onnxruntime(flowc, tmp_path, opset):
    rng = np.random.default_rng(opset)
    for name, (model, inputs) in models(rng).items():
        converted = model if opset == 11 else version_converter.convert_version(model, opset)
        path = save(converted, tmp_path / f"{name}_opset{opset}.onnx")
        flowc.submit(path)
        ours = flowc.execute(path.with_suffix(".fca"), inputs)
        reference = onnxruntime_outputs(path, inputs)
        for output in reference:
            assert_close(ours[output], reference[output])
