"""The models that killed the daemon (issue 13), submitted through the real
daemon: each fails with one clear line and its exit status, and the daemon
keeps serving (a good model still compiles after it)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import make_models
from conftest import assert_close, onnxruntime_outputs, save

# Exit statuses (cli/Common.h): 3 bad input, 5 no resources.
BAD, UNAVAILABLE = 3, 5


def model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


def conv_with_zero_strides():
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    return model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", strides=[0, 0])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])


def output_listed_twice():
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    return model([helper.make_node("Relu", ["x"], ["y"], name="act")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], [y, y])


def constant_of_shape_2_60():
    shape = numpy_helper.from_array(np.array([1 << 30, 1 << 30], np.int64), "shape")
    fill = numpy_helper.from_array(np.array([1.0], np.float32))
    return model([helper.make_node("ConstantOfShape", ["shape"], ["c"], name="fill", value=fill),
                  helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])


def range_of_a_trillion():
    scalars = [numpy_helper.from_array(np.array(v, np.int64), n)
               for n, v in (("start", 0), ("limit", 10**12), ("delta", 1))]
    return model([helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
                  helper.make_node("Cast", ["r"], ["rf"], name="cast", to=TensorProto.FLOAT),
                  helper.make_node("Add", ["x", "rf"], ["y"], name="add")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], scalars)



def expand_a_weight_to_4_tib():
    """A splat broadcast to 2^40 floats: code generation would write it into
    the kernel's object byte by byte (minutes, then out of memory)."""
    one = numpy_helper.from_array(np.ones([1], np.float32), "one")
    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "shape")
    return model([helper.make_node("Expand", ["one", "shape"], ["y"], name="expand")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [one, shape])

def conv_transpose_stride_2_31():
    """Zeros between elements 2^31 apart: past int64 before any check."""
    weight = numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")
    return model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up",
                                   strides=[2**31 - 1, 2**31 - 1])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2**20, 2**20])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])


def conv_transpose_with(**attributes):
    weight = numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")
    return lambda: model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", **attributes)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])


def scatter_far_out():
    """A constant scatter index far outside the data."""
    indices = numpy_helper.from_array(np.array([[0], [2**62]], np.int64), "k")
    updates = numpy_helper.from_array(np.ones((2, 4), np.float32), "u")
    return model([helper.make_node("ScatterND", ["x", "k", "u"], ["y"], name="put")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                 [indices, updates])


def tile_past_int64():
    repeats = numpy_helper.from_array(np.array([2**62, 4], np.int64), "r")
    return model([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 2])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [repeats])


CASES = {
    "conv_transpose_stride_2_31": (conv_transpose_stride_2_31, BAD,
                                   "node 'up' (ConvTranspose): strides "
                                   "[2147483647,2147483647] spread input"),
    "conv_transpose_output_padding_2": (
        conv_transpose_with(strides=[2, 2], output_padding=[2, 0]), BAD,
        "node 'up' (ConvTranspose): output_padding 2 is not below its stride or dilation"),
    "conv_transpose_auto_pad_sideways": (
        conv_transpose_with(auto_pad="SIDEWAYS"), BAD,
        "node 'up' (ConvTranspose): auto_pad 'SIDEWAYS' is not one of NOTSET, SAME_UPPER"),
    "conv_transpose_pads_eat_it_all": (
        conv_transpose_with(pads=[3, 0, 3, 0]), BAD,
        "node 'up' (ConvTranspose): pads [3,0,3,0] leave no output"),
    "scatter_far_out": (scatter_far_out, BAD,
                        "node 'put' (ScatterND): index 4611686018427387904 (update 1) is out "
                        "of range for axis 0 of [3,4]"),
    "tile_past_int64": (tile_past_int64, BAD,
                        "node 'tile' (Tile): repeats [4611686018427387904,4] cannot tile"),
    "conv_strides_0": (conv_with_zero_strides, BAD,
                       "node 'conv0' (Conv): strides[0] = 0 is out of range [1, 2147483647]"),
    "output_twice": (output_listed_twice, BAD,
                     "graph output 'y' is listed twice (graph.output[0] and [1])"),
    "constant_of_shape_2_60": (constant_of_shape_2_60, UNAVAILABLE,
                               "node 'fill' (ConstantOfShape): folding its "
                               "[1073741824,1073741824] constant at import needs "
                               "1152921504606846976 elements of 8 bytes"),
    "expand_to_4_tib": (expand_a_weight_to_4_tib, UNAVAILABLE,
                        "would be 4398046511104 bytes of code, over the limit of"),
    "range_1e12": (range_of_a_trillion, UNAVAILABLE,
                   "node 'range' (Range): folding its [1000000000000] constant at import "
                   "needs 1000000000000 elements of 8 bytes"),
}


@pytest.fixture
def populated(flowc, tmp_path):
    """A daemon that has compiled a good model once."""
    good = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "good.onnx")
    flowc.submit(good)
    return flowc, good


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_model_fails_cleanly_and_the_daemon_survives(populated, tmp_path, case):
    flowc, good = populated
    build, exit_status, message = CASES[case]
    path = tmp_path / f"{case}.onnx"
    onnx.save(build(), path)
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == exit_status, result.stderr
    assert result.stderr.startswith("flowc: error: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "out.fca").exists()
    # The same daemon answers: a hit on the model it compiled before, and a
    # fresh compile of a new one.
    assert flowc.submit(good)["cache"] == "hit"
    other = save(make_models.make_cnn(np.random.default_rng(1)), tmp_path / "other.onnx")
    assert flowc.submit(other)["cache"] != "hit"


def test_one_value_as_two_outputs_compiles_and_runs(flowc, tmp_path):
    """Two graph outputs of one tensor (SIGSEGV in code generation before)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act"),
             helper.make_node("Identity", ["r"], ["y1"], name="first"),
             helper.make_node("Identity", ["r"], ["y2"], name="second")]
    path = save(model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
                       for n in ("y1", "y2")]), tmp_path / "alias.onnx")
    flowc.submit(path)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    outputs = flowc.execute(path.with_suffix(".fca"), {"x": x})
    expected = onnxruntime_outputs(path, {"x": x})
    for name in ("y1", "y2"):
        assert_close(outputs[name], expected[name])


def test_an_lrn_window_of_2_31_channels_builds_only_what_reaches_them(flowc, tmp_path):
    """size 2^31 - 1 (onnxruntime asks for 32 GiB): every window covers all
    four channels, so the result is numpy's with the sum over all of them."""
    lrn = model([helper.make_node("LRN", ["x"], ["y"], name="lrn", size=2**31 - 1,
                                  alpha=2.0**31)],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])])
    path = save(lrn, tmp_path / "lrn.onnx")
    flowc.submit(path)
    x = np.random.default_rng(3).standard_normal((1, 4, 2, 2)).astype(np.float32)
    squares = np.sum(x.astype(np.float64) ** 2, axis=1, keepdims=True)
    expected = x / (1.0 + 2.0**31 / (2**31 - 1) * squares) ** 0.75
    assert_close(flowc.execute(path.with_suffix(".fca"), {"x": x})["y"], expected, rtol=1e-5)
