"""A DenseNet-style network (every layer concatenates all earlier feature
maps, then BatchNorm, Relu and a convolution): compiled at -O3 it matches
onnxruntime, and its profile shows what the layout passes did. The NCHW
views of the convolutions' results sink through the concatenations and the
BatchNorm arithmetic (flowc-sink-transposes), so every convolution and
pooling reads and writes NHWC; the BatchNorm + Relu after each
concatenation runs per concatenated input and writes into its slice of the
next convolution's input (flowc-distribute-over-concat and
eliminate-empty-tensors), so no call copies into a concatenation. Nothing
here is timed."""
import json

import numpy as np
import pytest

import make_models
from conftest import assert_close, onnxruntime_outputs, save


@pytest.fixture(params=[1, 2], ids=["batch1", "batch2"])
def dense(request, tmp_path):
    rng = np.random.default_rng(11)
    path = save(make_models.make_dense_cnn(rng, batch=request.param), tmp_path / "dense.onnx")
    x = tmp_path / "x.npy"
    np.save(x, rng.standard_normal((request.param, 3, 16, 16)).astype(np.float32))
    return path, x


def profile(flowc, artifact, x):
    out = flowc.run("run", artifact, "--input", f"image={x}", "--profile", "--json",
                    "--bench", "2", "--threads", "1").stdout
    return json.loads(out)["profile"]["calls"]


def test_dense_network_matches_onnxruntime_without_concat_copies(flowc, dense, tmp_path):
    path, x = dense
    artifact = tmp_path / "dense.fca"
    flowc.submit(path, artifact, "-O", "3")
    image = np.load(x)
    ours = flowc.execute(artifact, {"image": image})["logits"]
    assert_close(ours, onnxruntime_outputs(path, {"image": image})["logits"])
    calls = profile(flowc, artifact, x)
    # No call copies into a concatenation: the BatchNorm + Relu pieces
    # write in place.
    copies = [c for c in calls if "Concat" in c["ops"]]
    assert not copies, copies
    # Four convolutions, the stem's too, and two poolings (the max pool and
    # the global average pool), none in the library's reference code.
    library = [c for c in calls if "site" in c]
    assert sorted(c["kind"] for c in library).count("conv2d") == 5
    pools = [c for c in library if c["kind"] == "pool2d"]
    assert len(pools) == 2
    assert not [c for c in library if "ref" in c["implementation"]], library
    # The elementwise work is per input: the BatchNorm over the
    # concatenation of k inputs runs as k pieces, for k = 1 to 5.
    pieces = [c for c in calls if "site" not in c and "BatchNormalization" in c["ops"]]
    assert len(pieces) == 1 + 2 + 3 + 4 + 5, pieces


def test_without_the_layout_passes_the_result_is_the_same(flowc, dense, tmp_path):
    """With the transposes left where the importer put them, the max pool
    reads NHWC and writes NCHW (into the first concatenation): the runtime
    runs it in one layout and reorders, never in the reference kernel."""
    path, x = dense
    image = np.load(x)
    plain = tmp_path / "plain.fca"
    flowc.submit(path, plain, "-O", "3", "--disable-pass", "flowc-sink-transposes",
                 "--disable-pass", "flowc-distribute-over-concat",
                 "--disable-pass", "eliminate-empty-tensors")
    ours = flowc.execute(plain, {"image": image})["logits"]
    assert_close(ours, onnxruntime_outputs(path, {"image": image})["logits"])
    library = [c for c in profile(flowc, plain, x) if "site" in c]
    pool = next(c for c in library if c["kind"] == "pool2d" and "pool" in c["node_names"])
    assert "ref" not in pool["implementation"], pool


def test_a_concatenation_of_hundreds_of_computed_inputs_compiles_and_matches(flowc, tmp_path):
    """600 inputs, each computed (in place they would make one alias set
    whose bufferization cost grows with the cube of the inputs: minutes):
    joined by copies instead (flowc-copy-wide-concats), same result."""
    from onnx import TensorProto, helper, numpy_helper
    count = 600
    nodes, initializers, pieces = [], [], []
    for i in range(count):
        initializers.append(numpy_helper.from_array(np.full([1, 1], i / count, np.float32),
                                                    f"c{i}"))
        nodes.append(helper.make_node("Add", ["x", f"c{i}"], [f"a{i}"]))
        nodes.append(helper.make_node("Tanh", [f"a{i}"], [f"t{i}"]))
        pieces.append(f"t{i}")
    nodes.append(helper.make_node("Concat", pieces, ["y"], axis=0))
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count, 8])], initializers)
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8), tmp_path / "wide.onnx")
    x = np.random.default_rng(3).standard_normal((1, 8)).astype(np.float32)
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"x": x})["y"]
    assert_close(ours, onnxruntime_outputs(path, {"x": x})["y"])
