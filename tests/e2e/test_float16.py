"""Half-precision models (docs/compiler.md, Half precision): float16 graphs,
float16 and bfloat16 weights and casts. Each node that reads half values
computes in float32; the graph rounds to half at its outputs and where it
casts. Real models are the torchvision and transformer exports rewritten as
float16 (examples/to_float16.py; LR-ASPP's Resize keeps its float32 scales),
checked against onnxruntime running the same float16 file."""
import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import to_float16
from conftest import (assert_close, main_after_derive_weights, model_inputs,
                      onnxruntime_outputs, save)

# float16 keeps 11 significant bits: the bound for 16-bit results.
HALF_RTOL = 1e-2


def half_model(directory, name, tmp_path):
    """The export `name` as float16, with its float inputs rounded to it."""
    path = tmp_path / f"{name}_fp16.onnx"
    onnx.save(to_float16.to_float16(onnx.load(directory / f"{name}.onnx")), path)
    inputs = {key: value.astype(np.float16) if value.dtype == np.float32 else value
              for key, value in model_inputs(directory, name).items()}
    return path, inputs


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "lraspp_mobilenet_v3_large",
                                  "bert", "gpt2"])
def test_real_model_in_float16_matches_onnxruntime(flowc, real_models, tmp_path, name):
    path, inputs = half_model(real_models[17], name, tmp_path)
    flowc.submit(path)
    artifact = path.with_suffix(".fca")
    ours = flowc.execute(artifact, inputs)
    reference = onnxruntime_outputs(path, inputs)
    assert ours.keys() == reference.keys()
    for key, expected in reference.items():
        assert expected.dtype == np.float16
        assert ours[key].dtype == np.float16, key
        assert_close(ours[key].astype(np.float32), expected.astype(np.float32), HALF_RTOL)


def test_half_weights_are_widened_once_and_packed_like_float32_ones(flowc, real_models,
                                                                     tmp_path):
    """ResNet-18's float16 convolution weights become float32 weights derived
    at link, which the convolutions read packed in their layouts, as they do
    a float32 model's: nothing widens a weight at run time."""
    path, inputs = half_model(real_models[17], "resnet18", tmp_path)
    flowc.submit(path)
    artifact = path.with_suffix(".fca")
    args = flowc.input_args(artifact, inputs)
    report = json.loads(flowc.run("run", artifact, *args, "--json").stdout)
    assert report["packed_weights_in_place"] >= 20
    # Half only at the graph's input: every weight @main binds is float32
    # (each recipe, which widens its float16 source, aside).
    main, signature = main_after_derive_weights(flowc, path, tmp_path / "again.fca")
    half_arguments = re.findall(r"%arg\d+: tensor<[^>]*xf16>", signature)
    assert half_arguments == ["%arg0: tensor<1x3x224x224xf16>"], signature[:400]
    assert main.count("flowc.recipe =") >= 20


def bfloat16_tensor(name, values):
    bits = np.frombuffer(values.astype(np.float32).tobytes(), np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return helper.make_tensor(name, TensorProto.BFLOAT16, values.shape,
                              rounded.astype(np.uint16).tobytes(), raw=True)


def to_bfloat16(values):
    """float32 rounded to bfloat16 (nearest, ties to even), as float32."""
    bits = np.frombuffer(values.astype(np.float32).tobytes(), np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return np.frombuffer(rounded.astype(np.uint32).tobytes(), np.float32).reshape(values.shape)


def test_bfloat16_weights_and_casts_round_to_nearest_even(flowc, tmp_path):
    """onnxruntime has no CPU MatMul for bfloat16; numpy, rounding where the
    graph does, is the reference, and the products of bfloat16 values are
    exact in float32, so the results match bit for bit."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
         helper.make_node("MatMul", ["xb", "w"], ["m"]),
         helper.make_node("Relu", ["m"], ["r"]),
         helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [bfloat16_tensor("w", weight)])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8), tmp_path / "bf16.onnx")
    # Integers below 2^8 are exact in bfloat16, so every product and sum is
    # exact and no summation order can differ.
    x = rng.integers(-8, 8, (4, 16)).astype(np.float32)
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"x": x})["y"]
    expected = to_bfloat16(np.maximum(x @ to_bfloat16(weight), 0))
    np.testing.assert_array_equal(ours, expected)
    # And with fractions: the output is bfloat16-rounded.
    x = rng.standard_normal((4, 16)).astype(np.float32)
    ours = flowc.execute(path.with_suffix(".fca"), {"x": x})["y"]
    assert np.array_equal(ours, to_bfloat16(ours))
    assert_close(ours, to_bfloat16(np.maximum(to_bfloat16(x) @ to_bfloat16(weight), 0)),
                 HALF_RTOL)


def test_half_constants_casts_and_fills_match_onnxruntime(flowc, tmp_path):
    """A float16 graph's small constants (a Clip bound, a scale), a
    ConstantOfShape filled with a float16 value, and casts between float16
    and integers (truncating towards zero) and float32."""
    half = TensorProto.FLOAT16
    # Not raw: ONNX keeps float16 values as bit patterns in int32_data.
    scale = helper.make_tensor("scale", half, [3], np.array([0.5, -2.0, 3.0], np.float16))
    assert not scale.raw_data and len(scale.int32_data) == 3
    low = numpy_helper.from_array(np.array(-1.5, np.float16), "low")
    high = numpy_helper.from_array(np.array(6.0, np.float16), "high")
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    fill = numpy_helper.from_array(np.array([0.1], np.float16), "fill")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["scaled"]),
         helper.make_node("Clip", ["scaled", "low", "high"], ["clipped"]),
         helper.make_node("ConstantOfShape", ["shape"], ["tenth"], value=fill),
         helper.make_node("Add", ["clipped", "tenth"], ["y"]),
         helper.make_node("Cast", ["y"], ["ints"], to=TensorProto.INT64),
         helper.make_node("Cast", ["ints"], ["back"], to=half),
         helper.make_node("Cast", ["y"], ["wide"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", half, [2, 3])],
        [helper.make_tensor_value_info("y", half, [2, 3]),
         helper.make_tensor_value_info("ints", TensorProto.INT64, [2, 3]),
         helper.make_tensor_value_info("back", half, [2, 3]),
         helper.make_tensor_value_info("wide", TensorProto.FLOAT, [2, 3])],
        [scale, low, high, shape])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8), tmp_path / "constants.onnx")
    x = np.array([[1.3, -2.7, 0.9], [7.1, 0.4, -0.33]], np.float16)
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"x": x})
    reference = onnxruntime_outputs(path, {"x": x})
    for key, expected in reference.items():
        assert ours[key].dtype == expected.dtype, key
        np.testing.assert_array_equal(ours[key], expected, err_msg=key)


def test_a_float32_file_for_a_float16_input_is_refused(flowc, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8), tmp_path / "relu.onnx")
    flowc.submit(path)
    single = tmp_path / "single.npy"
    np.save(single, np.ones(3, np.float32))
    result = flowc.run("run", path.with_suffix(".fca"), "--input", f"x={single}", check=False)
    assert result.returncode == 3, result.stderr
    assert "input 'x' is float32, the model expects float16" in result.stderr
    ours = flowc.execute(path.with_suffix(".fca"), {"x": np.array([-1, 0.5, 2], np.float16)})
    np.testing.assert_array_equal(ours["y"], np.array([0, 0.5, 2], np.float16))
