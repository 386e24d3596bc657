"""One small graph per supported op and attribute combination, compared
with onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_close, onnxruntime_outputs, save

RNG = np.random.default_rng(2024)


def graph_case(name, nodes, inputs, output_shape, initializers=(), opset=17):
    """inputs: name -> shape. Returns (model, feeds)."""
    value_infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                   for n, s in inputs.items()]
    graph = helper.make_graph(
        nodes, name, value_infos,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
    return model, feeds


def weight(name, shape, scale=0.5):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def conv(name, **attrs):
    n = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    return n


CASES = {
    "conv_same_upper": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w", "b"], ["y"], auto_pad="SAME_UPPER",
                               strides=[2, 2])],
        {"x": [2, 3, 9, 9]}, [2, 4, 5, 5], [weight("w", [4, 3, 3, 3]), weight("b", [4])]),
    "conv_asymmetric_pads_no_bias": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 1, 2, 1])],
        {"x": [1, 2, 6, 7]}, [1, 3, 6, 7], [weight("w", [3, 2, 3, 3])]),
    "conv_dilated_5x5": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w", "b"], ["y"], dilations=[2, 2],
                               pads=[2, 2, 2, 2], strides=[3, 3])],
        {"x": [1, 2, 11, 11]}, [1, 2, 4, 4], [weight("w", [2, 2, 3, 3]), weight("b", [2])]),
    "maxpool_padded_strided": lambda: graph_case(
        "p", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                               pads=[1, 1, 1, 1])],
        {"x": [1, 4, 8, 8]}, [1, 4, 4, 4]),
    "averagepool": lambda: graph_case(
        "p", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
                               strides=[2, 2])],
        {"x": [2, 3, 6, 6]}, [2, 3, 3, 3]),
    "global_average_pool": lambda: graph_case(
        "g", [helper.make_node("GlobalAveragePool", ["x"], ["y"])],
        {"x": [2, 5, 7, 3]}, [2, 5, 1, 1]),
    "gemm_trans_alpha_beta": lambda: graph_case(
        "g", [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transA=1, transB=1, alpha=0.5,
                               beta=2.0)],
        {"x": [6, 3]}, [3, 5], [weight("w", [5, 6]), weight("c", [1, 5])]),
    "gemm_no_bias": lambda: graph_case(
        "g", [helper.make_node("Gemm", ["x", "w"], ["y"])],
        {"x": [4, 6]}, [4, 2], [weight("w", [6, 2])]),
    "matmul_batched": lambda: graph_case(
        "m", [helper.make_node("MatMul", ["a", "b"], ["y"])],
        {"a": [2, 3, 4, 5], "b": [2, 3, 5, 6]}, [2, 3, 4, 6]),
    "matmul_broadcast_weight": lambda: graph_case(
        "m", [helper.make_node("MatMul", ["a", "w"], ["y"])],
        {"a": [2, 3, 4]}, [2, 3, 6], [weight("w", [4, 6])]),
    "add_mul_sub_div_broadcast": lambda: graph_case(
        "e", [helper.make_node("Add", ["a", "b"], ["s"]),
              helper.make_node("Mul", ["s", "a"], ["m"]),
              helper.make_node("Sub", ["m", "b"], ["d"]),
              helper.make_node("Div", ["d", "k"], ["y"])],
        {"a": [2, 3, 4], "b": [3, 1]}, [2, 3, 4], [weight("k", [4], 1.0)]),
    "relu_sigmoid_tanh": lambda: graph_case(
        "a", [helper.make_node("Relu", ["x"], ["r"]),
              helper.make_node("Sigmoid", ["x"], ["s"]),
              helper.make_node("Tanh", ["x"], ["t"]),
              helper.make_node("Add", ["r", "s"], ["rs"]),
              helper.make_node("Add", ["rs", "t"], ["y"])],
        {"x": [3, 7]}, [3, 7]),
    "softmax_middle_axis": lambda: graph_case(
        "s", [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
        {"x": [2, 5, 3]}, [2, 5, 3]),
    "softmax_opset11_flattens": lambda: graph_case(
        "s", [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
        {"x": [2, 3, 4]}, [2, 3, 4], opset=11),
    "flatten_axis2_reshape_transpose": lambda: graph_case(
        "f", [helper.make_node("Flatten", ["x"], ["f"], axis=2),
              helper.make_node("Transpose", ["f"], ["t"], perm=[1, 0]),
              helper.make_node("Reshape", ["t", "shape"], ["y"])],
        {"x": [2, 3, 4, 5]}, [4, 5, 6],
        [numpy_helper.from_array(np.array([4, -1, 6], dtype=np.int64), "shape")]),
    "constant_node_operand": lambda: graph_case(
        "k", [helper.make_node("Constant", [], ["c"],
                               value=numpy_helper.from_array(
                                   np.arange(4, dtype=np.float32), "c")),
              helper.make_node("Mul", ["x", "c"], ["y"])],
        {"x": [3, 4]}, [3, 4]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_onnxruntime(flowc, tmp_path, case):
    model, feeds = CASES[case]()
    path = save(model, tmp_path / f"{case}.onnx")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), feeds)
    reference = onnxruntime_outputs(path, feeds)
    assert_close(ours["y"], reference["y"])
