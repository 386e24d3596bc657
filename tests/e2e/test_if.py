"""If whose condition folds at import (exporters' shape tests): the chosen
branch is imported in the node's place, reading the enclosing graph's
values. Compared with onnxruntime; what flowc refuses fails in one line
naming the node, and the daemon keeps serving."""
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_close, onnxruntime_outputs

UNSUPPORTED, BAD = 4, 3


def save(model, path):
    """The model as it is: untyped branch outputs fail onnx's checker,
    not onnxruntime."""
    path.write_bytes(model.SerializeToString())
    return path


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def branch(name, nodes, outputs, initializers=()):
    return helper.make_graph(nodes, name, [], [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        list(initializers))


def shape_test_model(axis_size_tested, then_nodes, else_nodes, outputs=("y",)):
    """x [2, 1, 6]: If (x.shape[1] == axis_size_tested) then ... else ...,
    each branch reading x and the outer `scale`."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["size"], axis=0),
             helper.make_node("Equal", ["size", "tested"], ["cond"]),
             helper.make_node("If", ["cond"], ["b"], name="choice",
                              then_branch=branch("then", then_nodes, ["then_out"],
                                                 [numpy_helper.from_array(
                                                     np.full([6], 2.0, np.float32),
                                                     "then_bias")]),
                              else_branch=branch("else", else_nodes, ["else_out"])),
             helper.make_node("Relu", ["b"], ["y"])]
    graph = helper.make_graph(
        nodes, "if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 6])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [ints("one", 1), ints("tested", axis_size_tested),
         numpy_helper.from_array(np.linspace(-1, 1, 6).astype(np.float32), "scale")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


# torch's squeeze of an axis that may be 1: Squeeze if it is, else as is.
THEN = [helper.make_node("Squeeze", ["x", "axes"], ["squeezed"]),
        helper.make_node("Constant", [], ["axes"], value=ints("axes_value", [1])),
        helper.make_node("Mul", ["squeezed", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "then_bias"], ["then_out"])]
ELSE = [helper.make_node("Mul", ["x", "scale"], ["else_out"])]
THEN_ORDERED = [THEN[1], THEN[0], THEN[2], THEN[3]]


@pytest.mark.parametrize("tested", [1, 3])
def test_folded_if_imports_the_chosen_branch(flowc, tmp_path, tested):
    model = save(shape_test_model(tested, THEN_ORDERED, ELSE), tmp_path / "if.onnx")
    flowc.submit(model)
    x = {"x": np.random.default_rng(1).standard_normal([2, 1, 6]).astype(np.float32)}
    ours = flowc.execute(model.with_suffix(".fca"), x)["y"]
    expected = onnxruntime_outputs(model, x)["y"]
    # then squeezes [2, 1, 6] to [2, 6]; else keeps it.
    assert ours.shape == expected.shape == ((2, 6) if tested == 1 else (2, 1, 6))
    assert_close(ours, expected)


def test_torch_local_response_norm_export(flowc, tmp_path):
    """Debian's torch exports nn.LocalResponseNorm as a 5-D AveragePool
    and an If on the pooled shape."""
    script = (
        "import sys, torch\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.LocalResponseNorm(5),"
        " torch.nn.ReLU()).eval()\n"
        "torch.onnx.export(m, torch.randn(1, 3, 16, 16), sys.argv[1], opset_version=17,"
        " input_names=['x'], output_names=['y'])\n")
    model = tmp_path / "lrn.onnx"
    subprocess.run(["/usr/bin/python3", "-c", script, str(model)], check=True,
                   capture_output=True, timeout=300)
    flowc.submit(model)
    x = {"x": np.random.default_rng(2).standard_normal([1, 3, 16, 16]).astype(np.float32)}
    assert_close(flowc.execute(model.with_suffix(".fca"), x)["y"],
                 onnxruntime_outputs(model, x)["y"])


def refused(tmp_path, flowc, model, code, message):
    path = save(model, tmp_path / "refused.onnx")
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "out.fca").exists()


def test_run_time_condition_is_refused(flowc, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
         helper.make_node("Greater", ["total", "zero"], ["cond"]),
         helper.make_node("If", ["cond"], ["y"], name="choice",
                          then_branch=branch("t", [helper.make_node("Neg", ["x"], ["t"])],
                                             ["t"]),
                          else_branch=branch("e", [helper.make_node("Abs", ["x"], ["e"])],
                                             ["e"]))],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    refused(tmp_path, flowc, model, UNSUPPORTED,
            "node 'choice' (If): the condition 'cond' is computed at run time")


def test_branch_writing_an_outer_value_is_refused(flowc, tmp_path):
    clash = [helper.make_node("Mul", ["x", "scale"], ["shape"])]
    refused(tmp_path, flowc, shape_test_model(3, THEN_ORDERED, clash), BAD,
            "node 'choice' (If): node 'shape' (Mul) in else_branch writes 'shape', which is "
            "already defined")


def test_branch_with_too_few_outputs_is_refused(flowc, tmp_path):
    model = shape_test_model(1, THEN_ORDERED, ELSE)
    # The branch that does not run is malformed all the same.
    else_branch = next(a for a in model.graph.node[3].attribute if a.name == "else_branch")
    del else_branch.g.output[:]
    refused(tmp_path, flowc, model, BAD, "node 'choice' (If): else_branch has 0 outputs")


def test_graphs_nested_past_the_limit_are_refused_and_the_daemon_serves(flowc, tmp_path):
    inner = branch("leaf", [helper.make_node("Identity", ["x"], ["o"])], ["o"])
    for depth in range(9):
        node = helper.make_node("If", ["cond"], [f"o{depth}"], then_branch=inner,
                                else_branch=inner)
        inner = branch(f"level{depth}", [node], [f"o{depth}"])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=inner, else_branch=inner)],
        "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(True), "cond")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    path = save(model, tmp_path / "deep.onnx")
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == BAD, result.stderr
    assert "graphs nested more than 8 deep" in result.stderr, result.stderr
    # The daemon is still there for the next model.
    ok = save(shape_test_model(1, THEN_ORDERED, ELSE), tmp_path / "ok.onnx")
    flowc.submit(ok)
