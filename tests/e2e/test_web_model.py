"""The model page's API (docs/web-ui.md): a compiled model's view, node by
node with its static cost and the kernels it became, the model index and
per-model cache entries, and the drawing of the graph through Graphviz with
repeated blocks collapsed. Checked against docs/api.yaml, against
`flowc inspect --json`, against the graph's own structure, and on
ConvNeXt-Tiny and BERT-base as torch exports them."""
import json
import re
import shutil
import urllib.parse

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import leaky_cnn, save
from webclient import Web, check

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (apt install graphviz)")


def layered(tmp_path, layers=6, width=32, seed=3):
    """A transformer-shaped MLP with torch-style scoped names: /encoder/
    layer.N/{fc1,act,fc2,add}/Op, every layer alike."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "input"
    for i in range(layers):
        s = f"/encoder/layer.{i}"
        for name, shape in [(f"w1_{i}", [width, width]), (f"b1_{i}", [width]),
                            (f"w2_{i}", [width, width]), (f"b2_{i}", [width])]:
            inits.append(numpy_helper.from_array(
                (rng.standard_normal(shape) * 0.1).astype(np.float32), name))
        nodes += [
            helper.make_node("MatMul", [x, f"w1_{i}"], [f"{s}/h"], name=f"{s}/fc1/MatMul"),
            helper.make_node("Add", [f"{s}/h", f"b1_{i}"], [f"{s}/hb"], name=f"{s}/fc1/Add"),
            helper.make_node("Relu", [f"{s}/hb"], [f"{s}/a"], name=f"{s}/act/Relu"),
            helper.make_node("MatMul", [f"{s}/a", f"w2_{i}"], [f"{s}/o"], name=f"{s}/fc2/MatMul"),
            helper.make_node("Add", [f"{s}/o", f"b2_{i}"], [f"{s}/ob"], name=f"{s}/fc2/Add"),
            helper.make_node("Add", [f"{s}/ob", x], [f"{s}/y"], name=f"{s}/residual/Add"),
        ]
        x = f"{s}/y"
    nodes.append(helper.make_node("Relu", [x], ["output"], name="/head/Relu"))
    graph = helper.make_graph(
        nodes, "layered",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [4, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return save(model, tmp_path / "layered.onnx")


def quoted(digest):
    return urllib.parse.quote(digest, safe=":/")


def test_a_compiled_model_has_a_view_with_costs_kernels_and_entries(flowc, tmp_path):
    web = Web.of(flowc)
    model = save(leaky_cnn(np.random.default_rng(5)), tmp_path / "cnn.onnx")
    result = flowc.submit(model)
    digest = result["model_digest"]
    jobs = web.json("/api/jobs", "JobList")["jobs"]
    assert jobs[-1]["model_digest"] == digest, jobs

    view = web.json(f"/api/models/{quoted(digest)}", "ModelView")
    assert view["digest"] == digest and view["model"] == "cnn.onnx"
    inspect = json.loads(flowc.run("inspect", str(model), "--json").stdout)
    # The same static profile as `flowc inspect`.
    ops = {}
    for node in view["nodes"]:
        ops[node["op"]] = ops.get(node["op"], 0) + node["flops"]
    for row in inspect["profile"]["ops"]:
        assert ops.get(row["op"], 0) == row["flops"], (row, ops)
    assert view["flops"] == inspect["profile"]["total"]["flops"]
    names = [n["name"] for n in view["nodes"]]
    conv = view["nodes"][names.index("conv1")]
    assert conv["op"] == "Conv" and conv["parameters"] > 0
    assert conv["outputs"][0]["shape"] and conv["attributes"]["kernel_shape"] == "[3,3]"

    # Every node that computes became some kernel (a Flatten is a view of
    # its input, no kernel); the conv and the ReLU after it one library call.
    kernels = view["kernels"]
    assert [kernels[k]["kind"] for k in conv["kernels"]] == ["conv2d"]
    relu = view["nodes"][names.index("relu1")]
    assert relu["kernels"] == conv["kernels"]
    for index, node in enumerate(view["nodes"]):
        if not node["folded"] and node["flops"] > 0:
            assert node.get("kernels"), node
        for k in node.get("kernels", []):
            assert index in kernels[k]["nodes"]
    assert "kernels" not in view["nodes"][names.index("flatten")]
    loops = [k for k in kernels if not k["library"]]
    assert loops and all(k["built"] == "compiled" and k["compile_seconds"] > 0 for k in loops)

    kinds = {e["kind"] for e in view["entries"]}
    assert {"artifact", "code", "kernel", "weight"} <= kinds, kinds
    assert all(e["present"] for e in view["entries"])
    assert view["present_bytes"] > 0

    index = web.json("/api/models", "ModelList")["models"]
    assert index[0]["digest"] == digest and index[0]["present"]
    assert index[0]["bytes"] >= view["parameter_bytes"]

    # A second submit is a hit: the view stays the compile's.
    flowc.submit(model)
    again = web.json(f"/api/models/{quoted(digest)}", "ModelView")
    assert again["code"] == "compiled" and again["kernels"] == kernels


def test_bad_model_digests_are_answered_not_crashed_on(flowc):
    web = Web.of(flowc)
    missing = "sha256:" + "0" * 64 + "/12"
    error = web.json(f"/api/models/{missing}", "Error", status=404)["error"]
    assert "submit it" in error
    web.json(f"/api/models/{missing}/graph.svg", "Error", status=404)
    code, _, _ = web.get("/api/models/sha256:xyz/1")
    assert code == 404
    code, _, _ = web.get("/api/models/" + "a" * 5000)
    assert code in (404, 414)
    assert web.json("/api/models", "ModelList")["models"] == []


@needs_dot
def test_the_graph_is_drawn_with_repeated_layers_collapsed(flowc, tmp_path):
    web = Web.of(flowc)
    digest = flowc.submit(layered(tmp_path))["model_digest"]
    code, kind, body = web.get(f"/api/models/{quoted(digest)}/graph.svg")
    assert code == 200 and kind.startswith("image/svg+xml"), (code, body[:300])
    svg = body.decode()
    ids = set(re.findall(r'<g id="([^"]+)" class="node"', svg))
    # Layers 1..5 compute as layer 0 does: one box for the run.
    assert "r:encoder/layer.0" in ids, ids
    assert "in:input" in ids and "out:output" in ids
    assert "×5 like layer.0" in svg
    # Layer 0 drawn node by node (the budget allows it), named by its op.
    opened = [i for i in ids if i.startswith("n")]
    assert opened, ids
    view = web.json(f"/api/models/{quoted(digest)}", "ModelView")
    for box in opened:
        node = view["nodes"][int(box[1:])]
        assert node["op"] in svg

    # Opening the run draws each layer; opening every layer, every node.
    code, _, body = web.get(f"/api/models/{quoted(digest)}/graph.svg?open=r:encoder/layer.0")
    ids = set(re.findall(r'<g id="([^"]+)" class="node"', body.decode()))
    assert not any(i.startswith("r:") for i in ids), ids
    layers = "&".join(f"open=g:encoder/layer.{i}" for i in range(6))
    code, _, body = web.get(
        f"/api/models/{quoted(digest)}/graph.svg?open=r:encoder/layer.0&{layers}")
    ids = set(re.findall(r'<g id="([^"]+)" class="node"', body.decode()))
    drawn = {int(i[1:]) for i in ids if re.fullmatch(r"n\d+", i)}
    assert drawn == set(range(len(view["nodes"]))), (len(drawn), len(view["nodes"]))


def test_a_view_names_the_kernel_of_every_node_of_a_bigger_graph(flowc, tmp_path):
    web = Web.of(flowc)
    digest = flowc.submit(layered(tmp_path, layers=3))["model_digest"]
    view = web.json(f"/api/models/{quoted(digest)}", "ModelView")
    matmuls = [n for n in view["nodes"] if n["op"] == "MatMul"]
    assert len(matmuls) == 6
    for node in matmuls:
        kernel = view["kernels"][node["kernels"][0]]
        assert kernel["library"] and kernel["kind"] == "matmul", kernel
        assert node["flops"] == 2 * 4 * 32 * 32


@needs_dot
@pytest.mark.parametrize("name", ["convnext_tiny", "bert"])
def test_real_models_are_drawn_readably(flowc, real_models, name):
    """ConvNeXt-Tiny and BERT-base as torch exports them: a drawing of a
    few dozen boxes, their repeated blocks folded, and (nearly) every node
    that computes mapped to its kernel."""
    web = Web.of(flowc)
    digest = flowc.submit(real_models[17] / f"{name}.onnx")["model_digest"]
    view = web.json(f"/api/models/{quoted(digest)}", "ModelView")
    assert len(view["nodes"]) > 200, len(view["nodes"])
    code, _, body = web.get(f"/api/models/{quoted(digest)}/graph.svg")
    assert code == 200, body[:300]
    ids = re.findall(r'<g id="([^"]+)" class="node"', body.decode())
    assert 5 <= len(ids) <= 80, (len(ids), ids)
    assert any(i.startswith("r:") for i in ids), ids
    computing = [n for n in view["nodes"] if not n["folded"] and n["flops"] > 0]
    unmapped = [n["name"] for n in computing if not n.get("kernels")]
    assert len(unmapped) <= len(computing) // 20, unmapped[:20]
