#!/usr/bin/env python3
"""Rewrites a float32 ONNX model as a float16 one, as fp16 model hubs ship.

    .venv/bin/python examples/to_float16.py IN.onnx OUT.onnx

Every float32 tensor becomes float16: the initializers, the graph's inputs
and outputs, Constant and ConstantOfShape values, and Cast's `to` (nested
graphs too). Operands that ONNX types as float32 whatever the model's type
stay float32: Resize's and Upsample's scales. The model's intermediate type
annotations are dropped and inferred again. Weights beyond float16's range
saturate at +-65504 and the rest round to nearest, as exporters do.

Debian's torch 1.13 has no float16 convolution on the CPU, so exporting a
float16 model there fails; this is how the tests and benchmarks get one.
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

#: (op, input index) operands that are float32 in every model.
FLOAT32_OPERANDS = {("Resize", 2), ("Upsample", 1)}
FLOAT16_MAX = float(np.finfo(np.float16).max)


def float16_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    values = numpy_helper.to_array(tensor)
    half = np.clip(values, -FLOAT16_MAX, FLOAT16_MAX).astype(np.float16)
    return numpy_helper.from_array(half, tensor.name)


def convert_graph(graph: onnx.GraphProto, keep: set):
    for value in list(graph.input) + list(graph.output):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    for i, tensor in enumerate(graph.initializer):
        if tensor.data_type == TensorProto.FLOAT and tensor.name not in keep:
            graph.initializer[i].CopyFrom(float16_tensor(tensor))
    del graph.value_info[:]
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Constant" and attribute.name == "value_float":
                values = np.array(attribute.f, np.float32)
                attribute.CopyFrom(onnx.helper.make_attribute(
                    "value", float16_tensor(numpy_helper.from_array(values))))
            elif node.op_type == "Constant" and attribute.name == "value_floats":
                values = np.array(attribute.floats, np.float32)
                attribute.CopyFrom(onnx.helper.make_attribute(
                    "value", float16_tensor(numpy_helper.from_array(values))))
            if node.op_type == "Cast" and attribute.name == "to" and \
                    attribute.i == TensorProto.FLOAT:
                attribute.i = TensorProto.FLOAT16
            if attribute.type == onnx.AttributeProto.TENSOR and \
                    attribute.t.data_type == TensorProto.FLOAT:
                attribute.t.CopyFrom(float16_tensor(attribute.t))
            if attribute.type == onnx.AttributeProto.GRAPH:
                convert_graph(attribute.g, keep)


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    keep = set()
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            for op, index in FLOAT32_OPERANDS:
                if node.op_type == op and index < len(node.input):
                    keep.add(node.input[index])
            graphs += [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    convert_graph(model.graph, keep)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("out")
    args = parser.parse_args()
    onnx.save(to_float16(onnx.load(args.source)), args.out)


if __name__ == "__main__":
    main()
