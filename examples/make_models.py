#!/usr/bin/env python3
"""Builds flowc's example models with onnx.helper and seeded random weights.

    make_models.py OUT_DIR [--seed N]

writes OUT_DIR/cnn.onnx (a small image classifier: Conv, Relu, MaxPool,
GlobalAveragePool, Flatten, Gemm, Softmax), OUT_DIR/mlp.onnx (MatMul, Add,
Relu, Reshape, Mul) and an input .npy for each.
"""
import argparse
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# onnxruntime reads IR versions up to 11; opset 17 belongs to IR version 8.
IR_VERSION = 8


def tensor(rng, name, shape, scale):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def make_cnn(rng, batch=1):
    """Conv(3->8) Relu MaxPool Conv(8->16) Relu GlobalAveragePool Flatten Gemm Softmax."""
    inits = [
        tensor(rng, "conv1.weight", (8, 3, 3, 3), 0.3),
        tensor(rng, "conv1.bias", (8,), 0.1),
        tensor(rng, "conv2.weight", (16, 8, 3, 3), 0.2),
        tensor(rng, "conv2.bias", (16,), 0.1),
        tensor(rng, "fc.weight", (10, 16), 0.5),
        tensor(rng, "fc.bias", (10,), 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="flowc-examples", ir_version=IR_VERSION)


def make_mlp(rng, batch=4):
    """MatMul Add Relu MatMul Add Mul, with a Reshape of the input."""
    shape = numpy_helper.from_array(np.array([batch, 64], dtype=np.int64), "flat_shape")
    inits = [
        shape,
        tensor(rng, "w1", (64, 32), 0.2),
        tensor(rng, "b1", (32,), 0.1),
        tensor(rng, "w2", (32, 8), 0.3),
        tensor(rng, "b2", (8,), 0.1),
        tensor(rng, "scale", (8,), 1.0),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "flat_shape"], ["xf"], name="flatten"),
        helper.make_node("MatMul", ["xf", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["hr"], name="relu"),
        helper.make_node("MatMul", ["hr", "w2"], ["o"], name="fc2"),
        helper.make_node("Add", ["o", "b2"], ["ob"], name="fc2_bias"),
        helper.make_node("Mul", ["ob", "scale"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="flowc-examples", ir_version=IR_VERSION)


def make_dense_cnn(rng, batch=1, layers=4, growth=8, size=16):
    """A DenseNet-style network: a stem Conv and MaxPool, then dense layers
    that each concatenate every earlier feature map and run BatchNorm, Relu
    and a 3x3 Conv on the concatenation, then BatchNorm, Relu,
    GlobalAveragePool, Flatten and Gemm on the concatenation of them all."""
    inits = [tensor(rng, "stem.weight", (16, 3, 3, 3), 0.3), tensor(rng, "stem.bias", (16,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["image", "stem.weight", "stem.bias"], ["stem"], name="stem",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["stem"], ["pool"], name="pool", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
    ]

    def batchnorm(x, name, channels):
        inits.extend([
            numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32),
                                    name + ".weight"),
            tensor(rng, name + ".bias", (channels,), 0.5),
            tensor(rng, name + ".running_mean", (channels,), 0.5),
            numpy_helper.from_array(rng.uniform(0.5, 2.0, channels).astype(np.float32),
                                    name + ".running_var"),
        ])
        nodes.append(helper.make_node(
            "BatchNormalization",
            [x] + [name + suffix for suffix in (".weight", ".bias", ".running_mean",
                                                ".running_var")],
            [name], name=name))
        nodes.append(helper.make_node("Relu", [name], [name + ".relu"], name=name + ".relu"))
        return name + ".relu"

    features, channels = ["pool"], 16
    for i in range(layers + 1):
        joined = f"concat{i}"
        nodes.append(helper.make_node("Concat", list(features), [joined], name=joined, axis=1))
        x = batchnorm(joined, f"norm{i}", channels)
        if i == layers:
            break
        inits.append(tensor(rng, f"conv{i}.weight", (growth, channels, 3, 3),
                            1 / np.sqrt(9 * channels)))
        nodes.append(helper.make_node("Conv", [x, f"conv{i}.weight"], [f"conv{i}"],
                                      name=f"conv{i}", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        features.append(f"conv{i}")
        channels += growth
    inits += [tensor(rng, "fc.weight", (10, channels), 0.3), tensor(rng, "fc.bias", (10,), 0.1)]
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc",
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "dense_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="flowc-examples", ir_version=IR_VERSION)


def make_encoder(rng, layers=12, hidden=64, heads=4, seq=16):
    """A BERT-shaped encoder with torch-style scoped names
    (/encoder/layer.N/attention/self/query/MatMul): per layer Q/K/V
    projections, scaled dot-product attention with Softmax, an output
    projection, residual Adds, two LayerNormalizations and a GELU MLP."""
    head = hidden // heads
    inits = [numpy_helper.from_array(np.array([1, seq, heads, head], dtype=np.int64), "split_shape"),
             numpy_helper.from_array(np.array([1, seq, hidden], dtype=np.int64), "merge_shape"),
             numpy_helper.from_array(np.array(np.sqrt(head), dtype=np.float32), "scale")]
    nodes = []

    def node(op, inputs, scope, **attrs):
        out = scope + "/" + op + "_output_0"
        nodes.append(helper.make_node(op, inputs, [out], name=scope + "/" + op, **attrs))
        return out

    def dense(x, scope, n_in, n_out):
        inits.append(tensor(rng, scope + ".weight", (n_in, n_out), 1 / np.sqrt(n_in)))
        inits.append(tensor(rng, scope + ".bias", (n_out,), 0.02))
        return node("Add", [node("MatMul", [x, scope + ".weight"], scope), scope + ".bias"], scope)

    def norm(x, scope):
        inits.append(numpy_helper.from_array(np.ones(hidden, dtype=np.float32), scope + ".weight"))
        inits.append(numpy_helper.from_array(np.zeros(hidden, dtype=np.float32), scope + ".bias"))
        return node("LayerNormalization", [x, scope + ".weight", scope + ".bias"], scope,
                    axis=-1, epsilon=1e-12)

    x = "hidden_states"
    for i in range(layers):
        s = f"/encoder/layer.{i}"
        a = s + "/attention/self"

        def heads_of(t, name):
            r = node("Reshape", [t, "split_shape"], a + "/" + name)
            return node("Transpose", [r], a + "/" + name, perm=[0, 2, 1, 3])
        q = heads_of(dense(x, a + "/query", hidden, hidden), "q")
        k = heads_of(dense(x, a + "/key", hidden, hidden), "k")
        v = heads_of(dense(x, a + "/value", hidden, hidden), "v")
        kt = node("Transpose", [k], a + "/kt", perm=[0, 1, 3, 2])
        scores = node("Div", [node("MatMul", [q, kt], a + "/scores"), "scale"], a)
        context = node("MatMul", [node("Softmax", [scores], a, axis=-1), v], a + "/context")
        merged = node("Reshape", [node("Transpose", [context], a + "/merge", perm=[0, 2, 1, 3]),
                                  "merge_shape"], a + "/merge")
        attended = dense(merged, s + "/attention/output/dense", hidden, hidden)
        x = norm(node("Add", [attended, x], s + "/attention/output"), s + "/attention/output/LayerNorm")
        inner = node("Gelu", [dense(x, s + "/intermediate/dense", hidden, 4 * hidden)],
                     s + "/intermediate")
        out = dense(inner, s + "/output/dense", 4 * hidden, hidden)
        x = norm(node("Add", [out, x], s + "/output"), s + "/output/LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/output/Identity"))
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])],
        inits)
    # Gelu is in the default domain from opset 20.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                             producer_name="flowc-examples", ir_version=IR_VERSION)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    models = {"cnn": (make_cnn(rng), (1, 3, 32, 32)), "mlp": (make_mlp(rng), (4, 4, 16))}
    for name, (model, input_shape) in models.items():
        onnx.checker.check_model(model, full_check=True)
        onnx.save(model, args.out_dir / f"{name}.onnx")
        np.save(args.out_dir / f"{name}_input.npy",
                rng.standard_normal(input_shape).astype(np.float32))
        print(f"wrote {args.out_dir / (name + '.onnx')}")


if __name__ == "__main__":
    main()
