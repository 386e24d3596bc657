"""NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss and LayerNormalization's
Mean and InvStdDev outputs against onnxruntime: every reduction, class
weights, ignore_index (inside the classes and outside them), scores of rank
2 to 5 and SoftmaxCrossEntropyLoss's log_prob output. A target outside the
classes that is not ignore_index fails the run naming the node."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_close, onnxruntime_outputs, save

BAD = 3

# name -> (op, scores shape, reduction, with weights, ignore_index or None)
CASES = {
    "nll_nc_mean": ("NegativeLogLikelihoodLoss", [5, 4], "mean", False, None),
    "nll_ncd1d2_weight_sum": ("NegativeLogLikelihoodLoss", [3, 5, 2, 4], "sum", True, None),
    "nll_ncd1_weight_ii_mean": ("NegativeLogLikelihoodLoss", [4, 3, 6], "mean", True, 1),
    "nll_ncd1d2d3_none_negative_ii": ("NegativeLogLikelihoodLoss", [2, 3, 2, 2, 3], "none",
                                      False, -5),
    "sce_nc_mean": ("SoftmaxCrossEntropyLoss", [5, 4], "mean", False, None),
    "sce_ncd1_weight_none": ("SoftmaxCrossEntropyLoss", [3, 5, 7], "none", True, None),
    "sce_ncd1d2_ii_mean": ("SoftmaxCrossEntropyLoss", [2, 4, 3, 3], "mean", False, 2),
    "sce_ncd1d2_weight_ii_sum": ("SoftmaxCrossEntropyLoss", [2, 4, 3, 3], "sum", True, 0),
}


def loss_model(op, shape, reduction, weighted, ignore_index, log_prob=False):
    target_shape = [shape[0]] + shape[2:]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
              helper.make_tensor_value_info("t", TensorProto.INT64, target_shape)]
    inits = []
    names = ["x", "t"]
    if weighted:
        weights = np.linspace(0.5, 2.0, shape[1]).astype(np.float32)
        inits.append(numpy_helper.from_array(weights, "w"))
        names.append("w")
    attributes = {"reduction": reduction}
    if ignore_index is not None:
        attributes["ignore_index"] = ignore_index
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, names, outputs, name="loss", **attributes)
    untyped = helper.make_model(helper.make_graph([node], "g", inputs, [], inits),
                                opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    inferred = {v.name: v for v in
                onnx.shape_inference.infer_shapes(untyped, strict_mode=True).graph.value_info}
    graph = helper.make_graph([node], "g", inputs, [inferred[n] for n in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def feeds(shape, ignore_index, seed=2):
    rng = np.random.default_rng(seed)
    target = rng.integers(0, shape[1], [shape[0]] + shape[2:]).astype(np.int64)
    if ignore_index is not None:
        target.flat[::3] = ignore_index
    return {"x": rng.standard_normal(shape).astype(np.float32), "t": target}


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_matches_onnxruntime(flowc, tmp_path, case):
    op, shape, reduction, weighted, ignore_index = CASES[case]
    log_prob = op == "SoftmaxCrossEntropyLoss"
    path = save(loss_model(op, shape, reduction, weighted, ignore_index, log_prob),
                tmp_path / f"{case}.onnx")
    flowc.submit(path)
    inputs = feeds(shape, ignore_index)
    ours = flowc.execute(path.with_suffix(".fca"), inputs)
    for name, value in onnxruntime_outputs(path, inputs).items():
        assert ours[name].shape == value.shape, name
        assert_close(ours[name], value)


def test_a_target_outside_the_classes_fails_the_run(flowc, tmp_path):
    path = save(loss_model("NegativeLogLikelihoodLoss", [3, 4], "mean", False, -1),
                tmp_path / "nll.onnx")
    flowc.submit(path)
    inputs = feeds([3, 4], None)
    inputs["t"] = np.array([0, -1, 3], np.int64)  # -1 is ignore_index
    assert_close(flowc.execute(path.with_suffix(".fca"), inputs)["loss"],
                 onnxruntime_outputs(path, inputs)["loss"])
    np.save(tmp_path / "x.npy", inputs["x"])
    np.save(tmp_path / "t.npy", np.array([0, 4, 1], np.int64))
    result = flowc.run("run", path.with_suffix(".fca"), "--input", f"x={tmp_path / 'x.npy'}",
                       "--input", f"t={tmp_path / 't.npy'}", "--output-dir", tmp_path / "out",
                       check=False)
    assert result.returncode == BAD, result.stderr
    assert ("node 'loss' (NegativeLogLikelihoodLoss): a target is outside [0, 3] and is not "
            "ignore_index") in result.stderr, result.stderr


@pytest.mark.parametrize("axis", [1, -1])
def test_layer_normalization_mean_and_inverse_deviation(flowc, tmp_path, axis):
    rng = np.random.default_rng(4)
    shape = [2, 3, 5]
    scale = rng.standard_normal(shape[axis:]).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "inv"], axis=axis)
    untyped = helper.make_model(
        helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      shape)], [],
                          [numpy_helper.from_array(scale, "s")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(untyped).graph.value_info}
    graph = helper.make_graph([node], "g", list(untyped.graph.input),
                              [inferred[n] for n in ("y", "mean", "inv")],
                              [numpy_helper.from_array(scale, "s")])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8), tmp_path / "ln.onnx")
    flowc.submit(path)
    inputs = {"x": rng.standard_normal(shape).astype(np.float32) * 3 + 1}
    ours = flowc.execute(path.with_suffix(".fca"), inputs)
    for name, value in onnxruntime_outputs(path, inputs).items():
        assert ours[name].shape == value.shape, name
        assert_close(ours[name], value)
