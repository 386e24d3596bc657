"""Models exported with symbolic dimensions ("batch") compile for the shape
`--input-shape NAME=DIMS` binds; the shape subgraph that reads them folds
away, each binding is its own artifact, and bad bindings are bad input."""
import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_close, onnxruntime_outputs, save

BAD, UNSUPPORTED = 3, 4


def dynamic_batch_model(rng):
    """y[batch, 2, 2] = reshape(x @ w, [shape(x)[0], 2, 2])."""
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2, 2], np.int64), "tail")]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["m", "target"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def model(tmp_path):
    return save(dynamic_batch_model(np.random.default_rng(0)), tmp_path / "dynamic.onnx")


def submit(flowc, model, out, *shapes, check=True):
    args = [a for shape in shapes for a in ("--input-shape", shape)]
    return flowc.run("submit", model, "-o", out, "--json", *args, check=check)


def test_unbound_symbolic_input_says_how_to_bind_it(flowc, model, tmp_path):
    result = submit(flowc, model, tmp_path / "y.fca", check=False)
    assert result.returncode == UNSUPPORTED, result.stderr
    assert "input 'x' has a symbolic shape [-1,4]" in result.stderr
    assert "--input-shape x=DIMS" in result.stderr


def test_each_binding_compiles_and_matches_onnxruntime(flowc, model, tmp_path):
    digests = {}
    for batch in (3, 5):
        out = tmp_path / f"b{batch}.fca"
        report = json.loads(submit(flowc, model, out, f"x={batch}x4").stdout)
        assert report["cache"] == "miss"
        digests[batch] = report["artifact_digest"]
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        ours = flowc.execute(out, {"x": x})["y"]
        assert ours.shape == (batch, 2, 2)
        assert_close(ours, onnxruntime_outputs(model, {"x": x})["y"])
    assert digests[3] != digests[5]
    # The unchanged file's memo is per binding: batch 3 again is batch 3's artifact.
    again = json.loads(submit(flowc, model, tmp_path / "again.fca", "x=3,4").stdout)
    assert again["cache"] == "hit" and again["artifact_digest"] == digests[3]


@pytest.mark.parametrize("shape,message", [
    ("x=3x5", "changes its static dimension 1"),
    ("x=3", "has rank 2"),
    ("nope=1x4", "'nope', which is not an input of the model"),
    ("x=3xq", "is not NAME=DIMS"),
    ("x=0x4", "non-positive dimension"),
])
def test_bad_binding_is_bad_input(flowc, model, tmp_path, shape, message):
    result = submit(flowc, model, tmp_path / "y.fca", shape, check=False)
    assert result.returncode == BAD, result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("flowc: error: ")
