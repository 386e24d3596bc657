"""One small graph per supported op and attribute combination, compared
with onnxruntime."""
import numpy as np
import onnx
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
    # 1-D: audio front ends (Whisper, wav2vec2) and sequence models.
    "conv1d_grouped_strided_dilated": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[2],
                               dilations=[2], pads=[1, 2])],
        {"x": [2, 4, 20]}, [2, 6, 10], [weight("w", [6, 2, 3]), weight("b", [6])]),
    "conv1d_same_upper": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")],
        {"x": [1, 3, 9]}, [1, 4, 9], [weight("w", [4, 3, 4])]),
    "conv1d_depthwise": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=4, pads=[2, 2])],
        {"x": [1, 4, 20]}, [1, 4, 20], [weight("w", [4, 1, 5]), weight("b", [4])]),
    "maxpool1d_ceil_padded": lambda: graph_case(
        "p", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2],
                               pads=[1, 0], ceil_mode=1)],
        {"x": [1, 3, 11]}, [1, 3, 6]),
    "averagepool1d": lambda: graph_case(
        "p", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2], strides=[2])],
        {"x": [2, 3, 10]}, [2, 3, 5]),
    # Transposed convolutions (decoders, GAN generators, upsampling heads).
    "conv_transpose_strided_padded": lambda: graph_case(
        "t", [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                               pads=[1, 0, 1, 1], output_padding=[1, 0])],
        {"x": [2, 3, 5, 4]}, [2, 4, 10, 8], [weight("w", [3, 4, 3, 3]), weight("b", [4])]),
    "conv_transpose_grouped_dilated": lambda: graph_case(
        "t", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2, strides=[3, 1],
                               dilations=[2, 2])],
        {"x": [1, 4, 3, 5]}, [1, 6, 11, 9], [weight("w", [4, 3, 3, 3])]),
    "conv_transpose_output_shape_same_upper": lambda: graph_case(
        "t", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2],
                               output_shape=[9, 10], auto_pad="SAME_UPPER")],
        {"x": [1, 2, 5, 5]}, [1, 3, 9, 10], [weight("w", [2, 3, 4, 4])]),
    "conv_transpose_output_shape_past_full": lambda: graph_case(
        "t", [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[3, 2],
                               output_shape=[11, 8])],
        {"x": [1, 1, 3, 3]}, [1, 2, 11, 8], [weight("w", [1, 2, 3, 3]), weight("b", [2])]),
    "conv_transpose_1d_crop": lambda: graph_case(
        "t", [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[4],
                               pads=[5, 3])],
        {"x": [2, 3, 6]}, [2, 2, 17], [weight("w", [3, 2, 5]), weight("b", [2])]),
    # 3-D convolution and pooling (video models): each output depth a 2-D
    # convolution over the input depths it reads, stacked as channels.
    "conv_3d_grouped_strided_dilated": lambda: graph_case(
        "v", [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[2, 1, 2],
                               dilations=[2, 1, 1], pads=[2, 1, 0, 1, 0, 2])],
        {"x": [2, 4, 7, 5, 6]}, [2, 6, 3, 4, 4], [weight("w", [6, 2, 3, 3, 2]),
                                                 weight("b", [6])]),
    "conv_3d_same_lower_depthwise": lambda: graph_case(
        "v", [helper.make_node("Conv", ["x", "w"], ["y"], group=3, strides=[2, 2, 1],
                               auto_pad="SAME_LOWER")],
        {"x": [1, 3, 5, 6, 4]}, [1, 3, 3, 3, 4], [weight("w", [3, 1, 2, 3, 3])]),
    "max_pool_3d_ceil_padded": lambda: graph_case(
        "v", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2, 3],
                               strides=[2, 2, 2], pads=[1, 0, 1, 1, 1, 0], ceil_mode=1)],
        {"x": [2, 3, 6, 5, 7]}, [2, 3, 4, 3, 4]),
    "average_pool_3d_padding_not_counted": lambda: graph_case(
        "v", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 3, 3],
                               strides=[1, 2, 2], pads=[1, 1, 1, 1, 1, 1], ceil_mode=1)],
        {"x": [1, 2, 4, 6, 5]}, [1, 2, 5, 4, 3]),
    "average_pool_3d_same_upper": lambda: graph_case(
        "v", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2, 2],
                               strides=[2, 2, 2], auto_pad="SAME_UPPER")],
        {"x": [1, 2, 5, 5, 4]}, [1, 2, 3, 3, 2]),
    "average_pool_counting_padding_ceil": lambda: graph_case(
        "a", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                               strides=[2, 2], pads=[1, 1, 0, 1], ceil_mode=1,
                               count_include_pad=1)],
        {"x": [1, 2, 7, 6]}, [1, 2, 4, 4]),
    "average_pool_3d_counting_padding_ceil": lambda: graph_case(
        "a", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 2],
                               strides=[2, 2, 2], pads=[1, 0, 0, 0, 0, 0], ceil_mode=1,
                               count_include_pad=1)],
        {"x": [1, 2, 6, 4, 4]}, [1, 2, 4, 2, 2]),
    # Dilated pooling: one axis at a time, through its taps.
    "max_pool_dilated_ceil": lambda: graph_case(
        "d", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1],
                               dilations=[2, 3], pads=[1, 1, 2, 0], ceil_mode=1)],
        {"x": [2, 3, 9, 8]}, [2, 3, 5, 6]),
    "average_pool_3d_dilated_padded": lambda: graph_case(
        "d", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 3, 2],
                               strides=[1, 2, 1], dilations=[2, 1, 2],
                               pads=[1, 1, 0, 1, 0, 1])],
        {"x": [1, 2, 5, 6, 5]}, [1, 2, 5, 3, 4], opset=19),
    # Reflection, edge and wrap padding (style transfer, CycleGAN).
    "pad_reflect_edge_wrap": lambda: graph_case(
        "p", [helper.make_node("Pad", ["x", "p1"], ["r"], mode="reflect"),
              helper.make_node("Pad", ["r", "p2"], ["e"], mode="edge"),
              helper.make_node("Pad", ["e", "p3"], ["y"], mode="wrap")],
        {"x": [1, 2, 5, 6]}, [1, 2, 18, 17],
        [numpy_helper.from_array(np.array([0, 0, 4, 1, 0, 0, 2, 5], np.int64), "p1"),
         numpy_helper.from_array(np.array([0, 0, 3, 0, 0, 0, 1, 2], np.int64), "p2"),
         numpy_helper.from_array(np.array([0, 0, 0, 3, 0, 0, 3, 0], np.int64), "p3")],
        opset=19),
    # Style transfer, GANs and diffusion blocks.
    "instance_normalization": lambda: graph_case(
        "n", [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"],
                               epsilon=1e-3)],
        {"x": [2, 3, 5, 7]}, [2, 3, 5, 7], [weight("s", [3]), weight("b", [3])]),
    "group_normalization": lambda: graph_case(
        "n", [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
        {"x": [2, 6, 4, 5]}, [2, 6, 4, 5], [weight("s", [6]), weight("b", [6])], opset=21),
    "lrn": lambda: graph_case(
        "l", [helper.make_node("LRN", ["x"], ["y"], size=5, alpha=0.2, beta=0.8, bias=2.0)],
        {"x": [2, 7, 3, 4]}, [2, 7, 3, 4]),
    "depth_to_space_dcr_crd_space_to_depth": lambda: graph_case(
        "d", [helper.make_node("DepthToSpace", ["x"], ["a"], blocksize=2),
              helper.make_node("DepthToSpace", ["x"], ["c"], blocksize=2, mode="CRD"),
              helper.make_node("Add", ["a", "c"], ["s"]),
              helper.make_node("SpaceToDepth", ["s"], ["y"], blocksize=2)],
        {"x": [2, 8, 3, 4]}, [2, 8, 3, 4]),
    "tile_trilu_global_max_pool": lambda: graph_case(
        "t", [helper.make_node("Tile", ["x", "r"], ["t"]),
              helper.make_node("Trilu", ["t", "k"], ["u"]),
              helper.make_node("Trilu", ["t"], ["l"], upper=0),
              helper.make_node("Add", ["u", "l"], ["s"]),
              helper.make_node("GlobalMaxPool", ["s"], ["y"])],
        {"x": [2, 3, 4, 5]}, [2, 9, 1, 1],
        [numpy_helper.from_array(np.array([1, 3, 2, 1], np.int64), "r"),
         numpy_helper.from_array(np.array(-1, np.int64), "k")]),
    "reduce_l1_l2_sumsquare_logsum_logsumexp": lambda: graph_case(
        "r", [helper.make_node("ReduceL1", ["x", "a"], ["l1"], keepdims=1),
              helper.make_node("ReduceL2", ["x", "a"], ["l2"], keepdims=1),
              helper.make_node("ReduceSumSquare", ["x", "a"], ["q"], keepdims=1),
              helper.make_node("Abs", ["x"], ["ax"]),
              helper.make_node("ReduceLogSum", ["ax", "a"], ["ls"], keepdims=1),
              helper.make_node("Mul", ["x", "big"], ["xb"]),
              helper.make_node("ReduceLogSumExp", ["xb", "a"], ["lse"], keepdims=1),
              helper.make_node("Sum", ["l1", "l2", "q", "ls", "lse"], ["y"])],
        {"x": [2, 3, 4]}, [2, 1, 4],
        [numpy_helper.from_array(np.array([1], np.int64), "a"),
         numpy_helper.from_array(np.array([60.0], np.float32), "big")], opset=18),
    # Round of values and of exact halves (to even), Sign.
    "sign_round": lambda: graph_case(
        "s", [helper.make_node("Mul", ["x", "k"], ["m"]),
              helper.make_node("Round", ["m"], ["r"]),
              helper.make_node("Floor", ["m"], ["f"]),
              helper.make_node("Add", ["f", "h"], ["t"]),
              helper.make_node("Round", ["t"], ["e"]),
              helper.make_node("Mul", ["e", "k"], ["e2"]),
              helper.make_node("Sign", ["x"], ["g"]),
              helper.make_node("Sum", ["r", "e2", "g"], ["y"])],
        {"x": [4, 25]}, [4, 25], [numpy_helper.from_array(np.array([2.0], np.float32), "k"),
                                  numpy_helper.from_array(np.array([0.5], np.float32), "h")]),
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
    "conv_depthwise_multiplier2": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=3, pads=[1, 1, 1, 1],
                               strides=[2, 2])],
        {"x": [1, 3, 7, 7]}, [1, 6, 4, 4], [weight("w", [6, 1, 3, 3]), weight("b", [6])]),
    "conv_grouped": lambda: graph_case(
        "c", [helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1])],
        {"x": [2, 4, 5, 5]}, [2, 6, 5, 5], [weight("w", [6, 2, 3, 3])]),
    "maxpool_ceil_mode": lambda: graph_case(
        "p", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                               ceil_mode=1)],
        {"x": [1, 2, 8, 8]}, [1, 2, 4, 4]),
    "averagepool_ceil_mode": lambda: graph_case(
        "p", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                               ceil_mode=1)],
        {"x": [1, 2, 5, 5]}, [1, 2, 3, 3]),
    "batchnorm": lambda: graph_case(
        "b", [helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"],
                               epsilon=1e-3)],
        {"x": [2, 3, 4, 4]}, [2, 3, 4, 4],
        [weight("s", [3]), weight("bb", [3]), weight("m", [3]),
         numpy_helper.from_array(np.array([0.5, 1.0, 2.0], np.float32), "v")]),
    "clip_min_max_inputs": lambda: graph_case(
        "c", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        {"x": [3, 5]}, [3, 5],
        [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
         numpy_helper.from_array(np.array(0.7, np.float32), "hi")]),
    "clip_opset10_attributes": lambda: graph_case(
        "c", [helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)],
        {"x": [3, 5]}, [3, 5], opset=10),
    "concat_axis1": lambda: graph_case(
        "k", [helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1)],
        {"a": [2, 1, 3], "b": [2, 4, 3], "c": [2, 2, 3]}, [2, 7, 3]),
    "reduce_mean_keepdims": lambda: graph_case(
        "r", [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, 3], keepdims=1)],
        {"x": [2, 3, 4, 5]}, [2, 1, 4, 1], opset=13),
    "reduce_mean_axes_input_opset18": lambda: graph_case(
        "r", [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
        {"x": [2, 3, 4]}, [2, 4],
        [numpy_helper.from_array(np.array([-2], np.int64), "axes")], opset=18),
    "squeeze_unsqueeze": lambda: graph_case(
        "s", [helper.make_node("Unsqueeze", ["x", "ax"], ["u"]),
              helper.make_node("Squeeze", ["u", "sq"], ["y"])],
        {"x": [3, 1, 4]}, [3, 4, 1],
        [numpy_helper.from_array(np.array([0, 4], np.int64), "ax"),
         numpy_helper.from_array(np.array([0, 2], np.int64), "sq")]),
    "leaky_hardsigmoid_hardswish": lambda: graph_case(
        "a", [helper.make_node("LeakyRelu", ["x"], ["l"], alpha=0.1),
              helper.make_node("HardSigmoid", ["x"], ["h"], alpha=0.3, beta=0.4),
              helper.make_node("HardSwish", ["x"], ["w"]),
              helper.make_node("Add", ["l", "h"], ["lh"]),
              helper.make_node("Add", ["lh", "w"], ["y"])],
        {"x": [4, 9]}, [4, 9]),
    "erf_sqrt_dropout": lambda: graph_case(
        "a", [helper.make_node("Erf", ["x"], ["e"]),
              helper.make_node("Mul", ["x", "x"], ["sq"]),
              helper.make_node("Sqrt", ["sq"], ["r"]),
              helper.make_node("Add", ["e", "r"], ["d"]),
              helper.make_node("Dropout", ["d"], ["y"])],
        {"x": [3, 6]}, [3, 6]),
    "shape_subgraph_folds_into_reshape": lambda: graph_case(
        "f", [helper.make_node("Shape", ["x"], ["s"]),
              helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
              helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
              helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
              helper.make_node("Reshape", ["x", "target"], ["y"])],
        {"x": [2, 3, 4]}, [2, 12],
        [numpy_helper.from_array(np.array(0, np.int64), "i0"),
         numpy_helper.from_array(np.array([0], np.int64), "ax0"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus1")]),
    # The decision ONNX's expanded Attention makes at import: repeat heads
    # when their counts differ and divide; Identity, Mod, Not, And, Less,
    # GreaterOrEqual, Or, Xor and Cast fold on the way.
    "shape_logic_folds_into_reshape": lambda: graph_case(
        "l", [helper.make_node("Shape", ["x"], ["s"]),
              helper.make_node("Identity", ["s"], ["si"]),
              helper.make_node("Slice", ["si", "one", "two"], ["heads"]),
              helper.make_node("Equal", ["heads", "four"], ["same"]),
              helper.make_node("Not", ["same"], ["differ"]),
              helper.make_node("Mod", ["heads", "two"], ["rest"]),
              helper.make_node("Equal", ["rest", "zero"], ["even"]),
              helper.make_node("And", ["differ", "even"], ["gqa"]),
              helper.make_node("Less", ["heads", "four"], ["fewer"]),
              helper.make_node("GreaterOrEqual", ["heads", "two"], ["some"]),
              helper.make_node("Or", ["fewer", "gqa"], ["either"]),
              helper.make_node("Xor", ["either", "some"], ["neither"]),
              helper.make_node("Cast", ["neither"], ["flag"], to=TensorProto.INT64),
              helper.make_node("Where", ["gqa", "two", "one"], ["repeat"]),
              helper.make_node("Add", ["repeat", "flag"], ["groups"]),
              helper.make_node("Concat", ["groups", "minus1"], ["target"], axis=0),
              helper.make_node("Reshape", ["x", "target"], ["y"])],
        {"x": [3, 6, 2]}, [2, 18],
        [numpy_helper.from_array(np.array([v], np.int64), n)
         for n, v in (("zero", 0), ("one", 1), ("two", 2), ("four", 4), ("minus1", -1))]),
    "expand_via_constant_of_shape_where": lambda: graph_case(
        "e", [helper.make_node("ConstantOfShape", ["three"], ["ones"],
                               value=numpy_helper.from_array(np.array([1], np.int64), "v")),
              helper.make_node("Mul", ["ones", "minus1"], ["neg"]),
              helper.make_node("Equal", ["shape", "neg"], ["is_neg"]),
              helper.make_node("Where", ["is_neg", "ones", "shape"], ["target"]),
              helper.make_node("Expand", ["x", "target"], ["y"])],
        {"x": [1, 1, 5]}, [4, 1, 5],
        [numpy_helper.from_array(np.array([3], np.int64), "three"),
         numpy_helper.from_array(np.array(-1, np.int64), "minus1"),
         numpy_helper.from_array(np.array([4, -1, 5], np.int64), "shape")]),
    "slice_and_gather_runtime": lambda: graph_case(
        "s", [helper.make_node("Slice", ["x", "st", "en", "ax"], ["sl"]),
              helper.make_node("Gather", ["sl", "idx"], ["y"], axis=1)],
        {"x": [3, 8, 6]}, [3, 2, 5],
        [numpy_helper.from_array(np.array([1, -5], np.int64), "st"),
         numpy_helper.from_array(np.array([2**62, 10], np.int64), "en"),
         numpy_helper.from_array(np.array([2, 1], np.int64), "ax"),
         numpy_helper.from_array(np.array([4, 0], np.int64), "idx")]),
    "gather_scalar_index_drops_axis": lambda: graph_case(
        "g", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
        {"x": [2, 5, 3]}, [2, 3],
        [numpy_helper.from_array(np.array(-1, np.int64), "i")]),
    "pow_cast": lambda: graph_case(
        "p", [helper.make_node("Pow", ["x", "two"], ["sq"]),
              helper.make_node("Pow", ["sq", "half"], ["ab"]),
              helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["ab", "kf"], ["y"])],
        {"x": [3, 4]}, [3, 4],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half"),
         numpy_helper.from_array(np.array([1, 2, 3, 4], np.int64), "k")]),
    "prelu_per_channel_after_conv": lambda: graph_case(
        "p", [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("PRelu", ["c", "slope"], ["y"])],
        {"x": [2, 3, 6, 6]}, [2, 4, 6, 6],
        [weight("w", [4, 3, 3, 3]), weight("b", [4]), weight("slope", [4, 1, 1])]),
    "prelu_runtime_slope_opset_9": lambda: graph_case(
        "p", [helper.make_node("PRelu", ["x", "slope"], ["y"])],
        {"x": [2, 3, 4], "slope": [4]}, [2, 3, 4], opset=9),
    "mish_opset_18": lambda: graph_case(
        "m", [helper.make_node("Mul", ["x", "four"], ["big"]),
              helper.make_node("Mish", ["big"], ["y"])],
        {"x": [3, 8]}, [3, 8],
        [numpy_helper.from_array(np.array(4.0, np.float32), "four")], opset=18),
    "constant_node_operand": lambda: graph_case(
        "k", [helper.make_node("Constant", [], ["c"],
                               value=numpy_helper.from_array(
                                   np.arange(4, dtype=np.float32), "c")),
              helper.make_node("Mul", ["x", "c"], ["y"])],
        {"x": [3, 4]}, [3, 4]),
    # Elementary functions TOSA lacks, from exp, log, sin, cos and compares;
    # x scaled by 3 to reach each function's tails.
    **{f"elementary_{op.lower()}": (lambda op=op, attrs=attrs: graph_case(
        "e", [helper.make_node("Mul", ["x", "three"], ["wide"]),
              helper.make_node(op, ["wide"], ["y"], **attrs)],
        {"x": [4, 16]}, [4, 16],
        [numpy_helper.from_array(np.array(3.0, np.float32), "three")]))
       for op, attrs in (("Tan", {}), ("Sinh", {}), ("Cosh", {}), ("Asinh", {}),
                         ("ThresholdedRelu", {"alpha": 0.4}),
                         ("Shrink", {"bias": 0.3, "lambd": 0.8}),
                         ("Celu", {"alpha": 2.0}))},
    # Acosh on [1, inf) and Atanh on (-1, 1).
    "elementary_acosh": lambda: graph_case(
        "e", [helper.make_node("Abs", ["x"], ["a"]),
              helper.make_node("Add", ["a", "one"], ["b"]),
              helper.make_node("Acosh", ["b"], ["y"])],
        {"x": [4, 16]}, [4, 16], [numpy_helper.from_array(np.array(1.0, np.float32), "one")]),
    "elementary_atanh": lambda: graph_case(
        "e", [helper.make_node("Tanh", ["x"], ["a"]),
              helper.make_node("Atanh", ["a"], ["y"])],
        {"x": [4, 16]}, [4, 16]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_onnxruntime(flowc, tmp_path, case):
    model, feeds = CASES[case]()
    path = save(model, tmp_path / f"{case}.onnx")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), feeds)
    reference = onnxruntime_outputs(path, feeds)
    assert_close(ours["y"], reference["y"])


def conv_transpose_sweep(count, seed):
    """`count` ConvTranspose nodes with drawn shapes and attributes (1-D and
    2-D; strides below, at and past the kernel; dilations, groups, pads,
    output_padding, output_shape and auto_pad), each on its own input."""
    rng = np.random.default_rng(seed)
    nodes, inputs, weights, feeds = [], [], [], {}
    for i in range(count):
        dims = int(rng.integers(1, 3))
        groups = int(rng.choice([1, 1, 2, 3]))
        in_channels = groups * int(rng.integers(1, 3))
        out_per_group = int(rng.integers(1, 3))
        kernel = [int(k) for k in rng.integers(1, 6, dims)]
        strides = [int(s) for s in rng.integers(1, 5, dims)]
        dilations = [int(d) for d in rng.choice([1, 1, 1, 2], dims)]
        spatial = [int(n) for n in rng.integers(1, 7, dims)]
        attrs = {"strides": strides, "dilations": dilations, "group": groups}
        style = rng.choice(["pads", "output_shape", "same"])
        full = [s * (n - 1) + d * (k - 1) + 1
                for s, n, d, k in zip(strides, spatial, dilations, kernel)]
        if style == "pads":
            attrs["pads"] = [int(rng.integers(0, (f + 1) // 2)) for f in full * 2]
            attrs["output_padding"] = [int(rng.integers(0, max(s, d)))
                                       for s, d in zip(strides, dilations)]
        elif style == "output_shape":
            # Less than a stride past the full extent: onnxruntime's output
            # for more is no shift of the transposed convolution.
            attrs["output_shape"] = [int(rng.integers(max(1, f - 3), f + s))
                                     for f, s in zip(full, strides)]
        else:
            attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER"]))
        names = [f"x{i}", f"w{i}"]
        weights.append(numpy_helper.from_array(
            rng.standard_normal([in_channels, out_per_group] + kernel).astype(np.float32),
            f"w{i}"))
        if rng.random() < 0.5:
            names.append(f"b{i}")
            weights.append(numpy_helper.from_array(
                rng.standard_normal([groups * out_per_group]).astype(np.float32), f"b{i}"))
        nodes.append(helper.make_node("ConvTranspose", names, [f"y{i}"], **attrs))
        shape = [2, in_channels] + spatial
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape))
        feeds[f"x{i}"] = rng.standard_normal(shape).astype(np.float32)
    def model(outputs):
        graph = helper.make_graph(nodes, "conv_transpose_sweep", inputs, outputs, weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                 ir_version=8)

    # Each output typed as ONNX's shape inference says.
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model([])).graph.value_info}
    return model([inferred[node.output[0]] for node in nodes]), feeds


def test_conv_transpose_sweep_matches_onnxruntime(flowc, tmp_path):
    """Drawn transposed convolutions, each output compared: the sub-pixel
    phases (stride <= kernel) and the zero-spread form (past it, or
    dilated) alike."""
    model, feeds = conv_transpose_sweep(48, seed=7)
    path = save(model, tmp_path / "conv_transpose_sweep.onnx")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), feeds)
    reference = onnxruntime_outputs(path, feeds)
    failed = []
    for node in model.graph.node:
        try:
            assert_close(ours[node.output[0]], reference[node.output[0]])
        except AssertionError as error:
            failed.append(f"{node.output[0]} {helper.printable_node(node)}: {error}")
    assert not failed, "\n".join(failed)


REFUSED_3D = {
    "conv_transpose_3d": (
        helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="n"), [1, 2, 3, 3, 3],
        [weight("w", [2, 2, 2, 2, 2])], 4, "only 1-D and 2-D transposed convolution"),
    "depth_kernel_over_the_limit": (
        helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[300, 1, 1]),
        [1, 1, 300, 2, 2], [], 4, "a depth kernel of 300 is over flowc's 256"),
    "dilated_pooling_window_over_the_limit": (
        helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[1, 1000],
                         dilations=[2, 1]), [1, 1, 2, 1000], [], 4,
        "a window of 1000 along axis 3 is over flowc's 256 for dilated pooling"),
    "depth_pads_past_the_kernel": (
        helper.make_node("AveragePool", ["x"], ["y"], name="n", kernel_shape=[2, 2, 2],
                         pads=[2, 0, 0, 0, 0, 0]), [1, 1, 3, 3, 3], [], 3,
        "pads 2 and 0 of axis 2 are not smaller than the kernel extent 2"),
    "conv_3d_kernel_past_the_depth": (
        helper.make_node("Conv", ["x", "w"], ["y"], name="n"), [1, 2, 2, 4, 4],
        [weight("w", [3, 2, 3, 1, 1])], 3,
        "kernel depth 3 is past the padded input depth 2"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_3D))
def test_3d_window_op_refusals_name_the_node(flowc, tmp_path, case):
    node, shape, initializers, code, message = REFUSED_3D[case]
    graph = helper.make_graph(
        [node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(model.SerializeToString())
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == code, result.stderr
    assert "node 'n' (" in result.stderr and message in result.stderr, result.stderr
    assert not (tmp_path / "out.fca").exists()


def test_celu_with_alpha_zero_is_refused(flowc, tmp_path):
    """Celu divides by alpha."""
    model, _ = graph_case("c", [helper.make_node("Celu", ["x"], ["y"], name="n", alpha=0.0)],
                          {"x": [2, 3]}, [2, 3], opset=12)
    path = tmp_path / "celu.onnx"
    path.write_bytes(model.SerializeToString())
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == 3, result.stderr
    assert "node 'n' (Celu): alpha is 0 (Celu divides by it)" in result.stderr, result.stderr


def inverse_trigonometry_inputs(op):
    """Each function's whole domain, its ends, and (Asin, Acos) past them."""
    if op == "Atan":
        wide = np.logspace(-30, 30, 601)
        values = np.concatenate([wide, -wide, np.linspace(-4, 4, 801),
                                 [0.0, -0.0, np.inf, -np.inf, np.tan(np.pi / 12)]])
    else:
        near = 1 - np.logspace(-7, -1, 61)
        values = np.concatenate([np.linspace(-1, 1, 2001), near, -near,
                                 [1e-30, -1e-30, 0.0, 1.0, -1.0, 1.5, -3.0]])
    return values.astype(np.float32)


@pytest.mark.parametrize("op", ["Atan", "Asin", "Acos"])
def test_inverse_trigonometry_is_accurate_across_its_domain(flowc, tmp_path, op):
    """Against NumPy in float64 on the float32 inputs: within 4 units in the
    last place of the result (relative 5e-7), NaN outside [-1, 1]."""
    x = inverse_trigonometry_inputs(op)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "trig",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8), tmp_path / "trig.onnx")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"x": x})["y"]
    with np.errstate(invalid="ignore"):
        exact = getattr(np, "arc" + op[1:].lower())(x.astype(np.float64))
    assert np.array_equal(np.isnan(ours), np.isnan(exact))
    finite = ~np.isnan(exact)
    error = np.abs(ours[finite] - exact[finite])
    bound = 5e-7 * np.maximum(np.abs(exact[finite]), 1e-37)
    worst = np.argmax(error / bound)
    assert np.all(error <= bound), (x[finite][worst], ours[finite][worst], exact[finite][worst])
