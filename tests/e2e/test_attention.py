"""ONNX's Attention (opset 23) and RMSNormalization against onnxruntime:
both layouts, bool and float masks of every rank (shorter than the keys
too), the causal mask with and without a KV cache, grouped-query heads,
softcap, scale, the present outputs and each qk_matmul_output mode; a
LLaMA-style decoder layer built from them. What is malformed fails the
compile in one line naming the node."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_close, device_target, onnxruntime_outputs, save, \
    skip_without_cuda_toolkit

BAD = 3
FLOAT, BOOL = TensorProto.FLOAT, TensorProto.BOOL

# name -> (inputs {name: shape, or (type, shape); None: absent}, attributes,
# outputs: Y, present_key, present_value, qk_matmul_output; "": absent)
CASES = {
    "4d": ({"q": [2, 3, 4, 8], "k": [2, 3, 6, 8], "v": [2, 3, 6, 5]}, {}, ["y"]),
    "3d": ({"q": [2, 4, 24], "k": [2, 6, 24], "v": [2, 6, 15]},
           {"q_num_heads": 3, "kv_num_heads": 3}, ["y"]),
    "3d_gqa_causal": ({"q": [2, 5, 32], "k": [2, 5, 16], "v": [2, 5, 16]},
                      {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}, ["y"]),
    "4d_gqa_mask_softcap": ({"q": [1, 6, 3, 8], "k": [1, 2, 7, 8], "v": [1, 2, 7, 8],
                             "attn_mask": [3, 7]}, {"softcap": 2.0, "scale": 0.5}, ["y"]),
    "bool_mask_4d": ({"q": [2, 2, 3, 4], "k": [2, 2, 5, 4], "v": [2, 2, 5, 4],
                      "attn_mask": (BOOL, [2, 1, 3, 5])}, {}, ["y"]),
    "float_mask_3d_causal": ({"q": [2, 2, 4, 4], "k": [2, 2, 4, 4], "v": [2, 2, 4, 4],
                              "attn_mask": [2, 4, 4]}, {"is_causal": 1}, ["y"]),
    "cache_causal": ({"q": [1, 4, 2, 8], "k": [1, 2, 2, 8], "v": [1, 2, 2, 8],
                      "attn_mask": None, "past_key": [1, 2, 5, 8], "past_value": [1, 2, 5, 8]},
                     {"is_causal": 1}, ["y", "present_key", "present_value"]),
    "cache_3d_qk_output": ({"q": [2, 1, 16], "k": [2, 1, 16], "v": [2, 1, 12],
                            "attn_mask": [1, 4], "past_key": [2, 4, 3, 4],
                            "past_value": [2, 4, 3, 3]},
                           {"q_num_heads": 4, "kv_num_heads": 4},
                           ["y", "present_key", "present_value", "qk"]),
}
for mode in range(4):
    CASES[f"qk_output_mode_{mode}"] = (
        {"q": [1, 2, 3, 4], "k": [1, 2, 5, 4], "v": [1, 2, 5, 4], "attn_mask": [3, 5],
         "past_key": None, "past_value": None},
        {"softcap": 1.5, "qk_matmul_output_mode": mode}, ["y", "", "", "qk"])


def attention_model(inputs, attributes, outputs):
    values = [helper.make_tensor_value_info(n, *(s if isinstance(s, tuple) else (FLOAT, s)))
              for n, s in inputs.items() if s is not None]
    node_inputs = [n if s is not None else "" for n, s in inputs.items()]
    node = helper.make_node("Attention", node_inputs, outputs, name="attn", **attributes)
    return typed(helper.make_graph([node], "attention", values, []), [n for n in outputs if n])


def typed(graph, outputs):
    """The model of `graph` with `outputs` typed as ONNX's shape inference
    says (a malformed node's as float of unknown shape)."""
    def model(g):
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    try:
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(
            model(graph), strict_mode=True).graph.value_info}
    except onnx.shape_inference.InferenceError:
        inferred = {}
    graph.output.extend(inferred.get(n) or helper.make_tensor_value_info(n, FLOAT, None)
                        for n in outputs)
    return model(graph)


def feeds_for(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == BOOL:
            mask = rng.random(shape) < 0.7
            mask[..., 0] = True  # no row entirely masked
            feeds[value.name] = mask
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_matches_onnxruntime(flowc, tmp_path, case):
    model = attention_model(*CASES[case])
    path = save(model, tmp_path / f"{case}.onnx")
    flowc.submit(path)
    feeds = feeds_for(model)
    ours = flowc.execute(path.with_suffix(".fca"), feeds)
    expected = onnxruntime_outputs(path, feeds)
    assert sorted(ours) == sorted(expected)
    for name, value in expected.items():
        assert ours[name].shape == value.shape, name
        finite = np.isfinite(value)
        assert np.array_equal(finite, np.isfinite(ours[name])), name
        assert_close(ours[name][finite], value[finite])


def test_a_mask_shorter_than_the_keys_is_padded_as_onnx_says(flowc, tmp_path):
    """ONNX pads a mask shorter than the keys with -inf (onnxruntime 1.23
    refuses it): compared with ONNX's reference implementation."""
    from onnx.reference import ReferenceEvaluator
    model = attention_model({"q": [1, 2, 3, 4], "k": [1, 2, 6, 4], "v": [1, 2, 6, 4],
                             "attn_mask": [3, 4]}, {}, ["y"])
    path = save(model, tmp_path / "short.onnx")
    flowc.submit(path)
    feeds = feeds_for(model)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    assert_close(flowc.execute(path.with_suffix(".fca"), feeds)["y"], expected)


def decoder_layer(hidden=64, heads=4, kv_heads=2, seq=5, past=7, seed=3):
    """RMSNorm, the q/k/v projections, grouped-query causal attention over
    a KV cache, the output projection and the residual: a LLaMA layer as
    an opset-23 exporter writes it."""
    rng = np.random.default_rng(seed)
    size = hidden // heads

    def weight(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32),
                                       name)

    inits = [weight("wq", [hidden, hidden]), weight("wk", [hidden, kv_heads * size]),
             weight("wv", [hidden, kv_heads * size]), weight("wo", [hidden, hidden]),
             numpy_helper.from_array((1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32),
                                     "gamma")]
    nodes = [helper.make_node("RMSNormalization", ["x", "gamma"], ["n"], epsilon=1e-6),
             helper.make_node("MatMul", ["n", "wq"], ["q"]),
             helper.make_node("MatMul", ["n", "wk"], ["k"]),
             helper.make_node("MatMul", ["n", "wv"], ["v"]),
             helper.make_node("Attention", ["q", "k", "v", "", "past_k", "past_v"],
                              ["a", "present_k", "present_v"], name="attn", is_causal=1,
                              q_num_heads=heads, kv_num_heads=kv_heads),
             helper.make_node("MatMul", ["a", "wo"], ["o"]),
             helper.make_node("Add", ["x", "o"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [1, seq, hidden]),
              helper.make_tensor_value_info("past_k", FLOAT, [1, kv_heads, past, size]),
              helper.make_tensor_value_info("past_v", FLOAT, [1, kv_heads, past, size])]
    graph = helper.make_graph(nodes, "decoder_layer", inputs, [], inits)
    return typed(graph, ["y", "present_k", "present_v"])


def test_a_llama_style_decoder_layer_matches_onnxruntime(flowc, tmp_path):
    model = decoder_layer()
    path = save(model, tmp_path / "layer.onnx")
    flowc.submit(path)
    feeds = feeds_for(model)
    ours = flowc.execute(path.with_suffix(".fca"), feeds)
    for name, value in onnxruntime_outputs(path, feeds).items():
        assert_close(ours[name], value)


def test_the_decoder_layer_compiles_for_cuda_and_matches_there(flowc, tmp_path):
    """The generated kernels assemble with ptxas; on a GPU they run."""
    skip_without_cuda_toolkit()
    path = save(decoder_layer(), tmp_path / "layer.onnx")
    target, why_not = device_target()
    artifact = tmp_path / "layer_cuda.fca"
    flowc.submit(path, artifact, "--target", target or "cuda:sm_90")
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    feeds = feeds_for(decoder_layer())
    ours = flowc.execute(artifact, feeds)
    for name, value in onnxruntime_outputs(path, feeds).items():
        assert_close(ours[name], value)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization_matches_onnxruntime(flowc, tmp_path, axis):
    rng = np.random.default_rng(axis + 5)
    scale_shape = [6] if axis == -1 else [4, 6]
    graph = helper.make_graph(
        [helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-4)],
        "rms", [helper.make_tensor_value_info("x", FLOAT, [3, 4, 6])], [],
        [numpy_helper.from_array(rng.standard_normal(scale_shape).astype(np.float32), "s")])
    path = save(typed(graph, ["y"]), tmp_path / "rms.onnx")
    flowc.submit(path)
    feeds = {"x": rng.standard_normal([3, 4, 6]).astype(np.float32)}
    assert_close(flowc.execute(path.with_suffix(".fca"), feeds)["y"],
                 onnxruntime_outputs(path, feeds)["y"])


REFUSED = {
    "heads_do_not_divide": ({"q": [2, 4, 24], "k": [2, 6, 24], "v": [2, 6, 24]},
                            {"q_num_heads": 5, "kv_num_heads": 3},
                            "Q [2,4,24] does not split into 5 heads"),
    "3d_without_heads": ({"q": [2, 4, 24], "k": [2, 6, 24], "v": [2, 6, 24]}, {},
                         "3-D inputs need q_num_heads and kv_num_heads"),
    "groups_do_not_divide": ({"q": [1, 3, 4, 8], "k": [1, 2, 4, 8], "v": [1, 2, 4, 8]}, {},
                             "3 query heads are not a multiple of 2 key/value heads"),
    "mask_too_long": ({"q": [1, 2, 4, 8], "k": [1, 2, 4, 8], "v": [1, 2, 4, 8],
                       "attn_mask": [4, 6]}, {},
                      "attn_mask [4,6] does not fit the scores [1,2,4,4]"),
    "past_without_value": ({"q": [1, 2, 4, 8], "k": [1, 2, 4, 8], "v": [1, 2, 4, 8],
                            "attn_mask": None, "past_key": [1, 2, 3, 8]}, {},
                           "past_key and past_value must be given together"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_malformed_attention_fails_in_one_line_naming_the_node(flowc, tmp_path, case):
    inputs, attributes, message = REFUSED[case]
    path = tmp_path / f"{case}.onnx"
    # Unchecked: ONNX's checker refuses some of these itself.
    path.write_bytes(attention_model(inputs, attributes, ["y"]).SerializeToString())
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == BAD, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "node 'attn' (Attention): " + message in result.stderr, result.stderr


# name -> (input shape, rotary_embedding_dim, interleaved, num_heads, with
# position ids)
ROTARY = {
    "4d_positions": ([2, 3, 4, 8], 0, 0, 0, True),
    "4d_interleaved_partial": ([2, 3, 4, 8], 4, 1, 3, True),
    "3d_heads": ([2, 4, 24], 0, 0, 3, True),
    "3d_no_positions_partial": ([2, 4, 24], 6, 0, 3, False),
    "4d_no_positions_interleaved": ([1, 2, 5, 6], 0, 1, 0, False),
}


def rotary_model(shape, dim, interleaved, heads, positions, max_positions=16):
    size = (shape[-1] // heads if len(shape) == 3 else shape[-1])
    half = (dim or size) // 2
    batch, length = shape[0], shape[1] if len(shape) == 3 else shape[2]
    cache = [max_positions, half] if positions else [batch, length, half]
    inputs = [helper.make_tensor_value_info("x", FLOAT, shape),
              helper.make_tensor_value_info("cos", FLOAT, cache),
              helper.make_tensor_value_info("sin", FLOAT, cache)]
    if positions:
        inputs.append(helper.make_tensor_value_info("pos", TensorProto.INT64, [batch, length]))
    attributes = {"interleaved": interleaved, "rotary_embedding_dim": dim}
    if heads:
        attributes["num_heads"] = heads
    node = helper.make_node("RotaryEmbedding", [i.name for i in inputs], ["y"], name="rope",
                            **attributes)
    return typed(helper.make_graph([node], "rope", inputs, []), ["y"])


@pytest.mark.parametrize("case", sorted(ROTARY))
def test_rotary_embedding_matches_onnxruntime(flowc, tmp_path, case):
    model = rotary_model(*ROTARY[case])
    path = save(model, tmp_path / f"{case}.onnx")
    flowc.submit(path)
    feeds = feeds_for(model)
    if "pos" in feeds:
        shape = feeds["pos"].shape
        feeds["pos"] = np.random.default_rng(1).integers(0, 16, shape).astype(np.int64)
    assert_close(flowc.execute(path.with_suffix(".fca"), feeds)["y"],
                 onnxruntime_outputs(path, feeds)["y"])


def test_a_position_past_the_cache_fails_the_run(flowc, tmp_path):
    path = save(rotary_model([1, 2, 3, 4], 0, 0, 0, True, max_positions=8),
                tmp_path / "rope.onnx")
    flowc.submit(path)
    args = []
    feeds = feeds_for(rotary_model([1, 2, 3, 4], 0, 0, 0, True, max_positions=8))
    feeds["pos"] = np.array([[0, 7, 8]], np.int64)
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    result = flowc.run("run", path.with_suffix(".fca"), *args, "--output-dir", tmp_path / "out",
                       check=False)
    assert result.returncode == BAD, result.stderr
    assert "node 'rope' (RotaryEmbedding): an index is outside [-8, 7]" in result.stderr, \
        result.stderr


@pytest.mark.parametrize("op, inputs, message", [
    ("RMSNormalization", ["x", "wide"],
     "scale [2,3,4,6] does not broadcast to the input [3,4,6]"),
    ("LayerNormalization", ["x", "g", "wide"],
     "bias [2,3,4,6] does not broadcast to the input [3,4,6]"),
    ("RMSNormalization", ["x", "five"], "shapes [3,4,6] and [5] cannot be broadcast"),
])
def test_a_scale_or_bias_that_does_not_fit_is_refused(flowc, tmp_path, op, inputs, message):
    """A scale or bias may broadcast up to the input, never widen it."""
    inits = [numpy_helper.from_array(np.ones([2, 3, 4, 6], np.float32), "wide"),
             numpy_helper.from_array(np.ones(5, np.float32), "five"),
             numpy_helper.from_array(np.ones(6, np.float32), "g")]
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name="norm")], "g",
                              [helper.make_tensor_value_info("x", FLOAT, [3, 4, 6])],
                              [helper.make_tensor_value_info("y", FLOAT, None)], inits)
    path = tmp_path / "norm.onnx"
    # Unchecked: ONNX's checker refuses it itself.
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                                       ir_version=10).SerializeToString())
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == BAD, result.stderr
    assert f"node 'norm' ({op}): {message}" in result.stderr, result.stderr
