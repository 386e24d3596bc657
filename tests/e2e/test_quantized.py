"""Quantized models (docs/compiler.md, Quantized models): int8 and uint8
values, QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and
MatMulInteger. Real models are the torchvision and transformer exports
quantized by onnxruntime's own tools (examples/quantize.py), checked
against onnxruntime running the same file; small graphs check the ops'
arithmetic exactly."""
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (ROOT, assert_close, main_after_derive_weights, model_inputs,
                      onnxruntime_outputs, save)

# A quantized graph rounds every activation to one of 256 steps: a
# float32 difference in a sum's order moves a value near a step's boundary
# to the next step, and the error travels through the layers. Against
# onnxruntime's float reference here, its own int8 kernels are at 1.6%
# (ResNet-18), 2.7% (MobileNetV3-Small) and 0.9% (BERT) of the output's
# scale, flowc's float32 arithmetic at 1.6%, 2.7% and 1.8%; sums in another
# order (another ISA) move them. A wrong zero point or scale is off by the
# whole output.
QUANTIZED_RTOL = 6e-2


def quantize(mode, source, target, *options):
    subprocess.run([sys.executable, str(ROOT / "examples" / "quantize.py"), mode, str(source),
                    str(target), *options], check=True, capture_output=True, timeout=600)
    return target


def reference_outputs(path, inputs):
    """onnxruntime's outputs without its graph rewrites: each QuantizeLinear
    and DequantizeLinear computed as ONNX defines it, not fused into int8
    kernels."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, inputs)))


@pytest.mark.parametrize("name,mode,options", [
    ("resnet18", "static", []),
    ("mobilenet_v3_small", "static", ["--per-channel", "--uint8"]),
    ("bert", "dynamic", []),
])
def test_quantized_model_matches_onnxruntime(flowc, real_models, tmp_path, name, mode, options):
    path = quantize(mode, real_models[17] / f"{name}.onnx", tmp_path / f"{name}_{mode}.onnx",
                    *options)
    inputs = model_inputs(real_models[17], name)
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), inputs)
    reference = reference_outputs(path, inputs)
    assert ours.keys() == reference.keys()
    for key, expected in reference.items():
        assert ours[key].dtype == expected.dtype
        assert_close(ours[key], expected, QUANTIZED_RTOL)


def test_quantized_weights_stay_8_bit_and_are_packed_at_link(flowc, real_models, tmp_path):
    """ResNet-18's 20 int8 convolution weights and its classifier's (a QDQ
    Gemm) stay 8-bit in the artifact: the integer kernels read them, packed
    at link: no weight is dequantized, at link or at run time."""
    path = quantize("static", real_models[17] / "resnet18.onnx", tmp_path / "r18_qdq.onnx")
    artifact = path.with_suffix(".fca")
    flowc.submit(path)
    args = flowc.input_args(artifact, model_inputs(real_models[17], "resnet18"))
    report = json.loads(flowc.run("run", artifact, *args, "--json").stdout)
    assert report["packed_weights_in_place"] == 21
    main, signature = main_after_derive_weights(flowc, path, tmp_path / "again.fca")
    weights = re.findall(r"tensor<[^>]*xi8>", signature)
    assert len(weights) == 21 and "tensor<1000x512xi8>" in weights, signature[:400]
    assert "flowc.recipe =" not in main


def profiled_run(flowc, artifact, inputs):
    """The report of a profiled run of `artifact` (`flowc run --profile
    --json`) and the kind of each of its calls, in order."""
    report = json.loads(flowc.run("run", artifact, *flowc.input_args(artifact, inputs),
                                  "--profile", "--json").stdout)
    return report, [c["kind"] for c in report["profile"]["calls"]]


def assert_within_one_step(actual, expected):
    """Requantized bytes at most one step from `expected`'s (another order
    of scaling the sums rounds some differently), and mostly equal."""
    steps = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert steps.max() <= 1 and np.mean(steps == 0) > 0.95, steps.max()


def run_both(flowc, tmp_path, model, inputs):
    path = save(model, tmp_path / f"{model.graph.name}.onnx")
    flowc.submit(path)
    return flowc.execute(path.with_suffix(".fca"), inputs), onnxruntime_outputs(path, inputs)


def test_per_axis_and_blocked_parameters_and_uint8_io_are_exact(flowc, tmp_path):
    """A uint8 image in, per-channel int8 weights, a blocked dequantization
    whose last block is short (opset 21), and a uint8 output: equal to
    onnxruntime, element for element."""
    rng = np.random.default_rng(7)
    weight = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    blocked = rng.integers(0, 256, (4, 10)).astype(np.uint8)
    initializers = [
        numpy_helper.from_array(np.array(1 / 255, np.float32), "pixel_scale"),
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.array([0.01, 0.02, 0.005, 0.04], np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(4, np.int8), "w_zero"),
        numpy_helper.from_array(blocked, "table"),
        # Blocks of 4 along axis 1: 10 columns are blocks of 4, 4 and 2.
        numpy_helper.from_array(rng.uniform(0.01, 0.1, (4, 3)).astype(np.float32),
                                "table_scale"),
        numpy_helper.from_array(rng.integers(100, 156, (4, 3)).astype(np.uint8), "table_zero"),
        numpy_helper.from_array(np.array(0.5, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "y_zero"),
    ]
    nodes = [
        helper.make_node("Cast", ["image"], ["pixels"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pixels", "pixel_scale"], ["x"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["wf"], axis=0),
        helper.make_node("Conv", ["x", "wf"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["table", "table_scale", "table_zero"], ["tf"],
                         axis=1, block_size=4),
        helper.make_node("GlobalAveragePool", ["conv"], ["pooled4"]),
        helper.make_node("Flatten", ["pooled4"], ["pooled"]),
        helper.make_node("MatMul", ["pooled", "tf"], ["mixed"]),
        helper.make_node("QuantizeLinear", ["mixed", "y_scale", "y_zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "quantized_io",
        [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 10])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    image = rng.integers(0, 256, (1, 3, 8, 8)).astype(np.uint8)
    ours, reference = run_both(flowc, tmp_path, model, {"image": image})
    assert ours["y"].dtype == np.uint8
    assert 0 < reference["y"].min() and reference["y"].max() < 255, "saturation only"
    np.testing.assert_array_equal(ours["y"], reference["y"])


def test_quantize_rounds_halves_to_even_and_saturates(flowc, tmp_path):
    """Quotients exactly halfway, others within a float32 step of halfway
    (where x * (1 / scale) would round the wrong way), values beyond the
    type's range, into int8 and uint8; then back."""
    scale = np.float32(0.1)
    halves = np.arange(-40, 40, dtype=np.float32) + np.float32(0.5)
    near = (halves * scale).astype(np.float32)
    x = np.concatenate([halves * 2, near, np.nextafter(near, np.float32(np.inf)),
                        np.nextafter(near, np.float32(-np.inf)),
                        np.array([300, -300, 1e9, -1e9], np.float32)]).reshape(1, -1)
    outputs, nodes = [], []
    for kind, dtype, zero in [("i8", np.int8, 3), ("u8", np.uint8, 100)]:
        nodes += [
            helper.make_node("QuantizeLinear", ["x", "scale", f"zero_{kind}"], [f"q_{kind}"]),
            helper.make_node("DequantizeLinear", [f"q_{kind}", "scale", f"zero_{kind}"],
                             [f"dq_{kind}"]),
        ]
        outputs += [helper.make_tensor_value_info(f"q_{kind}",
                                                  helper.np_dtype_to_tensor_dtype(
                                                      np.dtype(dtype)), x.shape),
                    helper.make_tensor_value_info(f"dq_{kind}", TensorProto.FLOAT, x.shape)]
    initializers = [numpy_helper.from_array(np.array(scale), "scale"),
                    numpy_helper.from_array(np.array(3, np.int8), "zero_i8"),
                    numpy_helper.from_array(np.array(100, np.uint8), "zero_u8")]
    graph = helper.make_graph(nodes, "rounding",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    ours, reference = run_both(flowc, tmp_path, model, {"x": x})
    for key, expected in reference.items():
        assert ours[key].dtype == expected.dtype, key
        np.testing.assert_array_equal(ours[key], expected, err_msg=key)


def test_casts_between_bytes_and_wider_types(flowc, tmp_path):
    """int8 <-> uint8 keep the bytes (-1 is 255), int32 -> int8 keeps the low
    byte, bytes -> float32 and int64 widen exactly, float32 -> uint8 truncates
    towards zero: as onnxruntime does."""
    signed = np.array([[-128, -1, 0, 1, 127]], np.int8)
    wide = np.array([[-129, 255, 256, 1000, -1]], np.int32)
    floats = np.array([[0.0, 1.9, 2.5, 254.7, 17.2]], np.float32)
    casts = [("signed", "to_u8", TensorProto.UINT8), ("to_u8", "back_i8", TensorProto.INT8),
             ("to_u8", "u8_f32", TensorProto.FLOAT), ("signed", "i8_i64", TensorProto.INT64),
             ("to_u8", "u8_i64", TensorProto.INT64), ("wide", "i32_i8", TensorProto.INT8),
             ("floats", "f32_u8", TensorProto.UINT8)]
    nodes = [helper.make_node("Cast", [a], [b], to=to) for a, b, to in casts]
    graph = helper.make_graph(
        nodes, "byte_casts",
        [helper.make_tensor_value_info("signed", TensorProto.INT8, [1, 5]),
         helper.make_tensor_value_info("wide", TensorProto.INT32, [1, 5]),
         helper.make_tensor_value_info("floats", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info(b, to, [1, 5]) for _, b, to in casts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    ours, reference = run_both(flowc, tmp_path, model,
                               {"signed": signed, "wide": wide, "floats": floats})
    for key, expected in reference.items():
        assert ours[key].dtype == expected.dtype, key
        np.testing.assert_array_equal(ours[key], expected, err_msg=key)


def int8_softmax():
    """A Softmax of an int8 input: an op that takes no bytes."""
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"])], "bytes",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def qlinear_conv(bias, weight_zeros):
    """A QLinearConv of 6 output channels with the given bias and weights'
    zero points."""
    rng = np.random.default_rng(37)
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    initializers = [
        numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
        numpy_helper.from_array(np.array(3, np.uint8), "xz"),
        numpy_helper.from_array(rng.integers(-128, 128, (6, 4, 3, 3)).astype(np.int8), "w"),
        numpy_helper.from_array(np.full(6, 0.01, np.float32), "ws"),
        numpy_helper.from_array(weight_zeros, "wz"),
        numpy_helper.from_array(np.array(0.2, np.float32), "ys"),
        numpy_helper.from_array(np.array(128, np.uint8), "yz"),
        numpy_helper.from_array(bias, "b"),
    ]
    graph = helper.make_graph(
        [helper.make_node("QLinearConv", names, ["y"])], "qlinear_conv",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 6, 3, 3])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("case,code,message", [
    ("softmax", 4, "node 'y'"),
    ("int16", 4, "quantizing to int16 is not supported (int8, uint8)"),
    ("misfit", 3, "input 's' of shape [3] fits neither one value, one per axis 1 entry"),
    ("short_bias", 3, "node 'y' (QLinearConv): bias 'b' [5] does not match 6 output channels"),
    ("weight_zeros", 3, "input 'wz' of shape [5] fits neither one value, one per axis 0 entry"),
])
def test_what_is_refused_says_why(flowc, tmp_path, case, code, message):
    if case == "softmax":
        model = int8_softmax()
        message = "input 'x' is int8; Softmax does not take 8-bit integers"
    elif case in ("short_bias", "weight_zeros"):
        model = qlinear_conv(bias=np.zeros(5 if case == "short_bias" else 6, np.int32),
                             weight_zeros=np.zeros(5 if case == "weight_zeros" else 6, np.int8))
    else:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
        scale = np.array([0.1, 0.2, 0.3] if case == "misfit" else 0.1, np.float32)
        zero = (np.zeros(3, np.int8) if case == "misfit"
                else np.array(0, np.int16))
        graph = helper.make_graph(
            [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], case, [x],
            [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(zero.dtype),
                                           [2, 4])],
            [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        model.ir_version = 10
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    result = flowc.run("submit", path, "-o", tmp_path / f"{case}.fca", check=False)
    assert result.returncode == code, result.stderr
    assert message in result.stderr, result.stderr
    assert not (tmp_path / f"{case}.fca").exists()


def test_integer_ops_on_bytes_wrap_and_select_exactly(flowc, tmp_path):
    """Arithmetic on int8 wraps as numpy's does (127 + 1 is -128, |-128| is
    -128); division truncates towards zero; Mod takes the divisor's sign;
    selections (Max, Clip, MaxPool) of uint8 values are uint8 values."""
    a = np.array([[127, -128, -7, 7, 100, -1]], np.int8)
    b = np.array([[1, -1, 2, -2, 3, 5]], np.int8)
    u = np.array([[[[0, 255, 128, 3], [9, 200, 1, 77]]]], np.uint8)
    binary = ["Add", "Sub", "Mul", "Div", "Mod"]
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()]) for op in binary]
    nodes += [helper.make_node("Abs", ["a"], ["abs"]), helper.make_node("Neg", ["a"], ["neg"]),
              helper.make_node("Max", ["u", "u2"], ["max"]),
              helper.make_node("Clip", ["u", "low", "high"], ["clip"]),
              helper.make_node("MaxPool", ["u"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("Greater", ["a", "b"], ["greater"])]
    outputs = [helper.make_tensor_value_info(name, dtype, shape) for name, dtype, shape in
               [(op.lower(), TensorProto.INT8, a.shape) for op in binary + ["Abs", "Neg"]]
               + [("max", TensorProto.UINT8, u.shape), ("clip", TensorProto.UINT8, u.shape),
                  ("pool", TensorProto.UINT8, [1, 1, 1, 2]),
                  ("greater", TensorProto.BOOL, a.shape)]]
    graph = helper.make_graph(
        nodes, "byte_ops",
        [helper.make_tensor_value_info("a", TensorProto.INT8, a.shape),
         helper.make_tensor_value_info("b", TensorProto.INT8, b.shape),
         helper.make_tensor_value_info("u", TensorProto.UINT8, u.shape)],
        outputs,
        [numpy_helper.from_array(np.full(u.shape, 100, np.uint8), "u2"),
         numpy_helper.from_array(np.array(5, np.uint8), "low"),
         numpy_helper.from_array(np.array(250, np.uint8), "high")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    path = save(model, tmp_path / "byte_ops.onnx")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"a": a, "b": b, "u": u})
    wide_a, wide_b = a.astype(np.int32), b.astype(np.int32)
    expected = {
        "add": (wide_a + wide_b).astype(np.int8), "sub": (wide_a - wide_b).astype(np.int8),
        "mul": (wide_a * wide_b).astype(np.int8),
        "div": np.trunc(wide_a / wide_b).astype(np.int8),
        "mod": np.mod(wide_a, wide_b).astype(np.int8),
        "abs": np.abs(wide_a).astype(np.int8), "neg": (-wide_a).astype(np.int8),
        "max": np.maximum(u, 100), "clip": np.clip(u, 5, 250),
        "pool": u.reshape(1, 1, 1, 2, 2, 2).max(axis=(3, 5)),
        "greater": a > b,
    }
    for key, value in expected.items():
        assert ours[key].dtype == value.dtype, key
        np.testing.assert_array_equal(ours[key], value, err_msg=key)


def test_weights_quantized_in_the_graph_are_quantized_once_at_import(flowc, tmp_path):
    """Quantization-aware training's exports quantize float32 weights in the
    graph (QuantizeLinear then DequantizeLinear, per output channel here):
    the weight is quantized at import, its dequantization derived at link,
    so no run computes either; results equal onnxruntime's reference."""
    rng = np.random.default_rng(11)
    weight = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    scale = (np.abs(weight).reshape(8, -1).max(axis=1) / 127).astype(np.float32)
    initializers = [numpy_helper.from_array(weight, "w"),
                    numpy_helper.from_array(scale, "w_scale"),
                    numpy_helper.from_array(np.zeros(8, np.int8), "w_zero")]
    nodes = [helper.make_node("QuantizeLinear", ["w", "w_scale", "w_zero"], ["wq"], axis=0),
             helper.make_node("DequantizeLinear", ["wq", "w_scale", "w_zero"], ["wf"], axis=0),
             helper.make_node("Conv", ["x", "wf"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "qat_weights",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [1, 8, 8, 8])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    path = save(model, tmp_path / "qat_weights.onnx")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"x": x})
    assert_close(ours["y"], reference_outputs(path, {"x": x})["y"], 1e-5)
    ir = flowc.run("submit", path, "-o", tmp_path / "again.fca", "--print-ir-after",
                   "flowc-derive-weights").stderr
    main = ir[ir.index("func.func @main"):]
    body = main[main.index("{\n"):]
    assert "f64" not in body and "xi8>" not in body, body[:2000]
    assert main.count("flowc.recipe =") == 1


def test_dynamic_cnn_with_conv_integer_matches_onnx_reference(flowc, tmp_path):
    """onnxruntime's dynamic quantization of a CNN writes ConvInteger with
    int8 weights, which onnxruntime itself cannot run on the CPU; ONNX's
    reference evaluator can. flowc matches it."""
    import make_models
    from onnx.reference import ReferenceEvaluator

    source = save(make_models.make_cnn(np.random.default_rng(5)), tmp_path / "cnn.onnx")
    path = quantize("dynamic", source, tmp_path / "cnn_dynamic.onnx")
    model = onnx.load(path)
    assert {n.op_type for n in model.graph.node} >= {"ConvInteger", "MatMulInteger",
                                                     "DynamicQuantizeLinear"}
    image = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"image": image})
    reference = ReferenceEvaluator(model).run(None, {"image": image})
    names = [o.name for o in model.graph.output]
    for name, expected in zip(names, reference):
        assert_close(ours[name], expected, 1e-5)


def integer_product_model(a_shape, b, a_type, a_zero=None, b_zero=None):
    """MatMulInteger of a run-time A (`a_type`) by the weight `b`, with the
    given zero points (numpy arrays, or None for none)."""
    initializers = [numpy_helper.from_array(b, "b")]
    inputs = ["a", "b"]
    for name, zero in (("a_zero", a_zero), ("b_zero", b_zero)):
        inputs.append(name if zero is not None else "")
        if zero is not None:
            initializers.append(numpy_helper.from_array(zero, name))
    while inputs[-1] == "":
        inputs.pop()
    out_shape = list(a_shape[:-1]) + [b.shape[-1]]
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", inputs, ["y"])], "integer_product",
        [helper.make_tensor_value_info("a", a_type, list(a_shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, out_shape)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def run_with_onnx_reference(flowc, tmp_path, model, inputs):
    """flowc's outputs and ONNX's reference evaluator's: onnxruntime has no
    MatMulInteger for some pairings of int8 and uint8."""
    from onnx.reference import ReferenceEvaluator

    path = save(model, tmp_path / f"{model.graph.name}.onnx")
    flowc.submit(path)
    names = [o.name for o in model.graph.output]
    reference = dict(zip(names, ReferenceEvaluator(model).run(None, inputs)))
    return flowc.execute(path.with_suffix(".fca"), inputs), reference


def has_vnni():
    flags = pathlib.Path("/proc/cpuinfo").read_text()
    return bool(re.search(r"\b(avx512_vnni|avx_vnni)\b", flags))


def test_integer_products_run_in_the_int8_kernel_exactly(flowc, tmp_path):
    """MatMulInteger of a 2-D B runs in the runtime's integer kernel: equal
    to ONNX's reference for every pairing of int8 and uint8, zero points absent,
    one, or one per column (B's), A with batch dimensions; -O0, where the
    kernel's float32 body runs, equal too. The weight stays 8-bit in the
    artifact, and the kernel reads it packed at link."""
    rng = np.random.default_rng(17)
    cases = [
        (TensorProto.UINT8, np.uint8, np.int8, np.array(131, np.uint8), None),
        (TensorProto.INT8, np.int8, np.int8, np.array(-5, np.int8), np.array(3, np.int8)),
        (TensorProto.UINT8, np.uint8, np.uint8, None, None),
        (TensorProto.INT8, np.int8, np.uint8, None, "per-column"),
    ]
    for index, (onnx_type, a_dtype, b_dtype, a_zero, b_zero) in enumerate(cases):
        info = np.iinfo(b_dtype)
        b = rng.integers(info.min, info.max + 1, (200, 24)).astype(b_dtype)
        if isinstance(b_zero, str):
            b_zero = rng.integers(info.min, info.max + 1, 24).astype(b_dtype)
        model = integer_product_model((2, 3, 200), b, onnx_type, a_zero, b_zero)
        model.graph.name = f"integer_product_{index}"
        a_info = np.iinfo(a_dtype)
        a = rng.integers(a_info.min, a_info.max + 1, (2, 3, 200)).astype(a_dtype)
        ours, reference = run_with_onnx_reference(flowc, tmp_path, model, {"a": a})
        np.testing.assert_array_equal(ours["y"], reference["y"], err_msg=f"case {index}")
        path = tmp_path / f"{model.graph.name}.onnx"
        report, _ = profiled_run(flowc, path.with_suffix(".fca"), {"a": a})
        assert [k["kind"] for k in report["profile"]["by_kind"]][0] == "integer_matmul"
        # The weight, packed at link into the kernel's layout, read in place.
        assert report["packed_weights_in_place"] == 1
        plain = tmp_path / f"{model.graph.name}_O0.fca"
        flowc.submit(path, plain, "-O0")
        np.testing.assert_array_equal(flowc.execute(plain, {"a": a})["y"], reference["y"])
        # One byte a parameter: the weight was not widened to float32.
        count = b.size + (a_zero is not None) + (0 if b_zero is None else b_zero.size)
        inspected = flowc.run("inspect", path.with_suffix(".fca")).stdout
        assert f"parameters: {count} ({count} bytes in" in inspected, inspected


def test_integer_product_sums_past_float32_are_exact_with_vnni(flowc, tmp_path):
    """Sums of 1024 full-range products pass 2^24, where float32 rounds;
    the int8 kernel sums in int32. On a CPU without VNNI the kernel runs in
    float32 (oneDNN's pre-VNNI int8 sums saturate), and the test says so."""
    if not has_vnni():
        pytest.skip("this CPU has no VNNI: integer products run in float32, exact below 2^24")
    b = np.where(np.arange(1024 * 8).reshape(1024, 8) % 2 == 0, 127, -128).astype(np.int8)
    model = integer_product_model((2, 1024), b, TensorProto.UINT8)
    a = np.full((2, 1024), 255, np.uint8)
    a[1, ::3] = 254
    ours, reference = run_both(flowc, tmp_path, model, {"a": a})
    assert np.abs(reference["y"]).max() > 2 ** 24
    np.testing.assert_array_equal(ours["y"], reference["y"])


def test_a_batched_integer_product_takes_the_float_path(flowc, tmp_path):
    """A batched B (two activations multiplied) is no kernel's form: the
    float32 products compute it, equal to onnxruntime for sums below 2^24."""
    rng = np.random.default_rng(19)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "a_zero"], ["y"])], "batched_integer",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 4, 16]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [2, 16, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 4, 5])],
        [numpy_helper.from_array(np.array(200, np.uint8), "a_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    inputs = {"a": rng.integers(0, 256, (2, 4, 16)).astype(np.uint8),
              "b": rng.integers(-128, 128, (2, 16, 5)).astype(np.int8)}
    ours, reference = run_both(flowc, tmp_path, model, inputs)
    np.testing.assert_array_equal(ours["y"], reference["y"])


def test_qdq_products_multiply_bytes_in_the_int8_kernel(flowc, tmp_path):
    """A MatMul, and a Gemm of a transposed weight with a bias, each of two
    DequantizeLinear results (the QDQ format's quantized product, weights
    scaled per output column) run in the integer kernel: sums of bytes,
    scaled once, as onnxruntime's int8 kernels compute them."""
    rng = np.random.default_rng(23)
    initializers = [
        numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(120, np.uint8), "x_zero"),
        numpy_helper.from_array(rng.integers(-128, 128, (64, 32)).astype(np.int8), "w"),
        numpy_helper.from_array(rng.uniform(0.01, 0.03, 32).astype(np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(32, np.int8), "w_zero"),
        numpy_helper.from_array(rng.integers(-128, 128, (16, 64)).astype(np.int8), "v"),
        numpy_helper.from_array(rng.uniform(0.01, 0.03, 16).astype(np.float32), "v_scale"),
        numpy_helper.from_array(np.zeros(16, np.int8), "v_zero"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "bias"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y"]),
        helper.make_node("DequantizeLinear", ["v", "v_scale", "v_zero"], ["vd"], axis=0),
        helper.make_node("Reshape", ["xq", "flat_shape"], ["xq2"]),
        helper.make_node("DequantizeLinear", ["xq2", "x_scale", "x_zero"], ["x2"]),
        helper.make_node("Gemm", ["x2", "vd", "bias"], ["z"], transB=1),
    ]
    initializers.append(numpy_helper.from_array(np.array([-1, 64], np.int64), "flat_shape"))
    graph = helper.make_graph(
        nodes, "qdq_products", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 32]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [6, 16])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((2, 3, 64)).astype(np.float32) * 3
    ours, kernels = run_both(flowc, tmp_path, model, {"x": x})
    for name in ("y", "z"):
        assert_close(ours[name], kernels[name], 1e-5)
    _, kinds = profiled_run(flowc, tmp_path / "qdq_products.fca", {"x": x})
    assert kinds.count("integer_matmul") == 2, kinds


def qdq_convolutions_model(rng):
    """The QDQ format's quantized convolutions: a uint8 source through a
    dense 3x3 convolution (weights per output channel, a bias), a depthwise
    one of stride 2 and uneven padding, and, from an int8 source, a 1x1
    one; one whose int8 weights have a zero point other than 0, and a
    depthwise one of uint8 weights with a zero point per channel (their
    window sums correct the sums); and a convolution of 2 groups (no form of
    the integer kernel's: float32)."""
    def weight(name, shape, axis_scales):
        return [numpy_helper.from_array(rng.integers(-128, 128, shape).astype(np.int8), name),
                numpy_helper.from_array(rng.uniform(0.005, 0.02, axis_scales).astype(np.float32),
                                        name + "_scale")]
    initializers = [
        numpy_helper.from_array(np.array(0.04, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(131, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(0.03, np.float32), "s_scale"),
        numpy_helper.from_array(np.array(-7, np.int8), "s_zero"),
        *weight("w", (16, 8, 3, 3), 16),
        numpy_helper.from_array(np.zeros(16, np.int8), "w_zero"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "bias"),
        *weight("d", (8, 1, 3, 3), ()),
        *weight("p", (4, 8, 1, 1), 4),
        *weight("z", (4, 8, 3, 3), ()),
        numpy_helper.from_array(np.array(3, np.int8), "z_zero"),
        numpy_helper.from_array(rng.integers(0, 256, (8, 1, 3, 3)).astype(np.uint8), "u"),
        numpy_helper.from_array(rng.uniform(0.005, 0.02, 8).astype(np.float32), "u_scale"),
        numpy_helper.from_array(rng.integers(100, 156, 8).astype(np.uint8), "u_zero"),
        *weight("g", (6, 4, 3, 3), ()),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bias"], ["dense"], pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["d", "d_scale"], ["dd"]),
        helper.make_node("Conv", ["xd", "dd"], ["depthwise"], group=8, strides=[2, 2],
                         pads=[1, 0, 0, 1]),
        helper.make_node("QuantizeLinear", ["x", "s_scale", "s_zero"], ["sq"]),
        helper.make_node("DequantizeLinear", ["sq", "s_scale", "s_zero"], ["sd"]),
        helper.make_node("DequantizeLinear", ["p", "p_scale"], ["pd"], axis=0),
        helper.make_node("Conv", ["sd", "pd"], ["pointwise"]),
        helper.make_node("DequantizeLinear", ["z", "z_scale", "z_zero"], ["zd"]),
        helper.make_node("Conv", ["xd", "zd"], ["shifted"], pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["u", "u_scale", "u_zero"], ["ud"], axis=0),
        helper.make_node("Conv", ["xd", "ud"], ["unsigned"], group=8, pads=[0, 1, 2, 1]),
        helper.make_node("DequantizeLinear", ["g", "g_scale"], ["gd"]),
        helper.make_node("Conv", ["xd", "gd"], ["grouped"], group=2),
    ]
    graph = helper.make_graph(
        nodes, "qdq_convolutions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 10, 10])],
        [helper.make_tensor_value_info("dense", TensorProto.FLOAT, [2, 16, 10, 10]),
         helper.make_tensor_value_info("depthwise", TensorProto.FLOAT, [2, 8, 5, 5]),
         helper.make_tensor_value_info("pointwise", TensorProto.FLOAT, [2, 4, 10, 10]),
         helper.make_tensor_value_info("shifted", TensorProto.FLOAT, [2, 4, 10, 10]),
         helper.make_tensor_value_info("unsigned", TensorProto.FLOAT, [2, 8, 10, 10]),
         helper.make_tensor_value_info("grouped", TensorProto.FLOAT, [2, 6, 8, 8])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_qdq_convolutions_convolve_bytes_in_the_int8_kernel(flowc, tmp_path):
    """A Conv of two DequantizeLinear results runs in the integer
    convolution kernel: sums of bytes, scaled once, plus the bias, within
    float32 rounding of onnxruntime's convolution of the dequantized values;
    dense, depthwise and 1x1, from uint8 and int8 sources, weights with and
    without zero points (those with them take a second call, the window
    sums). -O0 (TOSA's quantized convolutions as loops) is equal too. The
    weights stay 8-bit, packed at link; a grouped convolution's are
    dequantized at link for the float32 path."""
    rng = np.random.default_rng(29)
    model = qdq_convolutions_model(rng)
    x = rng.standard_normal((2, 8, 10, 10)).astype(np.float32) * 2
    ours, reference = run_both(flowc, tmp_path, model, {"x": x})
    for name, expected in reference.items():
        assert_close(ours[name], expected, 1e-5)
    path = tmp_path / "qdq_convolutions.onnx"
    artifact = path.with_suffix(".fca")
    report, kinds = profiled_run(flowc, artifact, {"x": x})
    # dense, depthwise, pointwise, shifted and unsigned, and the window sums
    # of the last two; the grouped one is a float32 convolution per group.
    assert kinds.count("integer_conv2d") == 7, kinds
    assert kinds.count("conv2d") == 2, kinds
    assert report["packed_weights_in_place"] >= 5
    plain = tmp_path / "qdq_convolutions_O0.fca"
    flowc.submit(path, plain, "-O0")
    slow = flowc.execute(plain, {"x": x})
    for name, expected in reference.items():
        assert_close(slow[name], expected, 1e-5)
    # The integer kernels' weights stay 8-bit in @main; the grouped one's
    # is dequantized at link.
    _, signature = main_after_derive_weights(flowc, path, tmp_path / "again.fca")
    assert sorted(re.findall(r"tensor<[^>]*xi8>", signature)) == [
        "tensor<16x8x3x3xi8>", "tensor<4x8x1x1xi8>", "tensor<4x8x3x3xi8>",
        "tensor<8x1x3x3xi8>", "tensor<8x1x3x3xi8>"], signature[:400]


def test_conv_integer_and_qlinear_conv_run_in_the_int8_kernel(flowc, tmp_path):
    """ConvInteger and QLinearConv with constant zero points run in the
    integer convolution kernel: ConvInteger's int32 sums equal
    onnxruntime's exactly (a uint8 source and uint8 weights with a zero
    point, read as int8 with their window sums); QLinearConv's requantized
    bytes are within one step of onnxruntime's QLinearConv (the two scale the
    sums in another order), and mostly equal."""
    rng = np.random.default_rng(31)
    initializers = [
        numpy_helper.from_array(rng.integers(0, 256, (6, 4, 3, 3)).astype(np.uint8), "w"),
        numpy_helper.from_array(np.array(119, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(131, np.uint8), "w_zero"),
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(rng.integers(-128, 128, (6, 4, 3, 3)).astype(np.int8), "v"),
        numpy_helper.from_array(rng.uniform(0.002, 0.01, 6).astype(np.float32), "v_scale"),
        numpy_helper.from_array(np.zeros(6, np.int8), "v_zero"),
        numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "y_zero"),
        numpy_helper.from_array(rng.integers(-2000, 2000, 6).astype(np.int32), "bias"),
    ]
    nodes = [
        helper.make_node("ConvInteger", ["x", "w", "x_zero", "w_zero"], ["sums"],
                         pads=[1, 1, 1, 1], strides=[2, 1]),
        helper.make_node("QLinearConv", ["x", "x_scale", "x_zero", "v", "v_scale", "v_zero",
                                         "y_scale", "y_zero", "bias"], ["y"], pads=[1, 0, 1, 2]),
    ]
    graph = helper.make_graph(
        nodes, "integer_convolutions",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 9, 9])],
        [helper.make_tensor_value_info("sums", TensorProto.INT32, [1, 6, 5, 9]),
         helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 6, 9, 9])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.integers(0, 256, (1, 4, 9, 9)).astype(np.uint8)
    ours, reference = run_both(flowc, tmp_path, model, {"x": x})
    np.testing.assert_array_equal(ours["sums"], reference["sums"])
    assert_within_one_step(ours["y"], reference["y"])
    _, kinds = profiled_run(flowc, tmp_path / "integer_convolutions.fca", {"x": x})
    # ConvInteger's and its window sums, and QLinearConv's.
    assert kinds.count("integer_conv2d") == 3 and "conv2d" not in kinds, kinds


def test_qlinear_matmul_runs_in_the_int8_kernel(flowc, tmp_path):
    """QLinearMatMul of a 2-D B (scales and zero points one per column)
    runs in the integer product kernel: its requantized bytes are within one
    step of onnxruntime's QLinearMatMul, and mostly equal; a batched B takes
    the float32 path, within one step too."""
    rng = np.random.default_rng(41)
    initializers = [
        numpy_helper.from_array(np.array(0.03, np.float32), "a_scale"),
        numpy_helper.from_array(np.array(121, np.uint8), "a_zero"),
        numpy_helper.from_array(rng.integers(-128, 128, (48, 16)).astype(np.int8), "b"),
        numpy_helper.from_array(rng.uniform(0.002, 0.01, 16).astype(np.float32), "b_scale"),
        numpy_helper.from_array(rng.integers(-3, 4, 16).astype(np.int8), "b_zero"),
        numpy_helper.from_array(np.array(0.08, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(125, np.uint8), "y_zero"),
        numpy_helper.from_array(rng.integers(-128, 128, (2, 48, 16)).astype(np.int8), "c"),
        numpy_helper.from_array(np.array(0.005, np.float32), "c_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "c_zero"),
    ]
    names = ["a", "a_scale", "a_zero"]
    graph = helper.make_graph(
        [helper.make_node("QLinearMatMul", names + ["b", "b_scale", "b_zero", "y_scale",
                                                    "y_zero"], ["y"]),
         helper.make_node("QLinearMatMul", names + ["c", "c_scale", "c_zero", "y_scale",
                                                    "y_zero"], ["z"])],
        "qlinear_matmul", [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 5, 48])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 5, 16]),
         helper.make_tensor_value_info("z", TensorProto.UINT8, [2, 5, 16])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    a = rng.integers(0, 256, (2, 5, 48)).astype(np.uint8)
    ours, reference = run_both(flowc, tmp_path, model, {"a": a})
    for name in ("y", "z"):
        assert_within_one_step(ours[name], reference[name])
    _, kinds = profiled_run(flowc, tmp_path / "qlinear_matmul.fca", {"a": a})
    assert kinds.count("integer_matmul") == 1, kinds


def test_a_1d_conv_integer_reads_its_uint8_bytes_as_uint8(flowc, tmp_path):
    """A 1-D ConvInteger runs as a 2-D one over a height of 1: the integer
    kernel reads that view of a uint8 source and uint8 weights as uint8
    (read as int8, they were 128 off), equal to onnxruntime's sums."""
    rng = np.random.default_rng(43)
    initializers = [
        numpy_helper.from_array(rng.integers(0, 256, (6, 4, 3)).astype(np.uint8), "w"),
        numpy_helper.from_array(np.array(100, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(140, np.uint8), "w_zero"),
    ]
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "x_zero", "w_zero"], ["y"], pads=[1, 1])],
        "line_conv_integer", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 12])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 6, 12])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.integers(0, 256, (1, 4, 12)).astype(np.uint8)
    ours, reference = run_both(flowc, tmp_path, model, {"x": x})
    np.testing.assert_array_equal(ours["y"], reference["y"])
    _, kinds = profiled_run(flowc, tmp_path / "line_conv_integer.fca", {"x": x})
    # The convolution and its window sums.
    assert kinds.count("integer_conv2d") == 2, kinds
