"""`flowc run --profile`: each kernel call of a run timed, named by the
graph nodes it computes, with its implementation, FLOPs and bytes; and the
errors for what it cannot profile. Nothing here is timed against a bound:
the checks are on what the profile says, not on how fast anything ran."""
import json

import numpy as np
import onnx
import pytest

import make_models
from conftest import save


@pytest.fixture
def cnn(tmp_path):
    rng = np.random.default_rng(3)
    model = make_models.make_cnn(rng, batch=1)
    path = save(model, tmp_path / "cnn.onnx")
    x = tmp_path / "x.npy"
    np.save(x, rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    return path, x, onnx.load(str(path))


def profile(flowc, artifact, x, *options):
    out = flowc.run("run", artifact, "--input", f"image={x}", "--profile", "--json",
                    *options).stdout
    return json.loads(out)["profile"]


def test_every_computing_node_is_in_a_timed_call(flowc, cnn, tmp_path):
    path, x, model = cnn
    artifact = tmp_path / "cnn.fca"
    flowc.submit(path, artifact)
    report = profile(flowc, artifact, x, "--bench", "5", "--threads", "1")
    assert report["runs"] == 5 and report["threads"] == 1
    assert "ISA" in report["cpu"]
    calls = report["calls"]
    names = {node.name: node.op_type for node in model.graph.node}
    # Each call is named by graph nodes, with those nodes' real op types.
    for call in calls:
        assert call["calls_per_run"] == 1
        assert call["ms"] >= 0 and 0 <= call["share"] <= 1
        for name, op in zip(call["node_names"], call["ops"]):
            assert names[name] == op
    covered = {name for call in calls for name in call["node_names"]}
    computing = {n.name for n in model.graph.node if n.op_type not in ("Flatten", "Reshape")}
    assert computing <= covered, computing - covered
    # The library calls: two convolutions (each with its ReLU), the max and
    # the global average pooling, the Gemm and the softmax, each naming what
    # oneDNN ran.
    library = [c for c in calls if "site" in c]
    assert sorted(c["kind"] for c in library) == ["conv2d", "conv2d", "matmul", "pool2d",
                                                  "pool2d", "softmax"]
    assert all(c["implementation"] and c["implementation"] != "generated" for c in library)
    conv = next(c for c in library if c["kind"] == "conv2d" and "conv1" in c["node_names"])
    assert "Relu" in conv["ops"]
    # conv1: 3->8 channels, 3x3, on 32x32 (same padding): 2 * 8*32*32 * 3*3*3
    # FLOPs, one more per output for the bias and one for the ReLU.
    assert conv["flops"] == 2 * 8 * 32 * 32 * 3 * 3 * 3 + 2 * 8 * 32 * 32
    # It reads the image and its weights and bias, and writes its output once.
    assert conv["bytes"] >= 4 * (3 * 32 * 32 + 8 * 32 * 32)
    assert all(c["implementation"] == "generated" for c in calls if "site" not in c)
    # Sorted by time; the sums per kind and per op cover every call.
    assert [c["ms"] for c in calls] == sorted((c["ms"] for c in calls), reverse=True)
    assert sum(k["calls_per_run"] for k in report["by_kind"]) == len(calls)
    assert sum(k["calls_per_run"] for k in report["by_op"]) == len(calls)
    assert report["kernel_ms"] <= report["run_ms"] * 1.0001
    assert abs(sum(c["ms"] for c in calls) - report["kernel_ms"]) < 1e-6


def test_the_table_lists_the_slowest_calls(flowc, cnn, tmp_path):
    path, x, _ = cnn
    artifact = tmp_path / "cnn.fca"
    flowc.submit(path, artifact)
    out = flowc.run("run", artifact, "--input", f"image={x}", "--profile",
                    "--profile-top", "2").stdout
    assert "profile: 10 runs, default threads" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "GFLOP/s" in line and "kernel" in line)
    assert "more calls:" in lines[header + 3]
    assert any(line.strip() == "by kind:" for line in lines)
    assert any("conv2d site" in line for line in lines[header + 1:header + 3])


def test_a_reshape_into_the_output_is_a_copy_of_its_node(flowc, tmp_path):
    # A Reshape computes nothing; writing the graph's output is a copy, a
    # generated loop kernel.
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [helper.make_tensor("shape", TensorProto.INT64, [1], [6])])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                tmp_path / "flat.onnx")
    artifact = tmp_path / "flat.fca"
    flowc.submit(path, artifact)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 3), np.float32))
    report = json.loads(flowc.run("run", artifact, "--input", f"x={x}", "--profile",
                                  "--json").stdout)["profile"]
    assert report["runs"] == 10 and report["calls"]
    for call in report["calls"]:
        # The copy into the caller's buffer may belong to no node.
        assert call["kind"] == "loops" and call["node_names"] in ([], ["flat"])
        assert call["flops"] == 0


def test_bad_profile_options_are_refused(flowc, cnn, tmp_path):
    path, x, _ = cnn
    artifact = tmp_path / "cnn.fca"
    flowc.submit(path, artifact)
    result = flowc.run("run", artifact, "--input", f"image={x}", "--profile",
                       "--profile-top", "0", check=False)
    assert result.returncode != 0 and "--profile-top" in result.stderr
