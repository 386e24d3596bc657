"""Integer arithmetic, casts, running sums, strided slices and scatters
against onnxruntime: the position-id and mask code of RoBERTa, T5, OPT,
LLaMA and Swin exports. One model holds every case, one output each;
what flowc refuses fails in one line naming the node."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import device_target, onnxruntime_outputs, save, skip_without_cuda_toolkit

UNSUPPORTED, BAD = 4, 3
SHAPE = [3, 10]
TYPES = {"f": TensorProto.FLOAT, "i": TensorProto.INT64, "j": TensorProto.INT32,
         "b": TensorProto.BOOL}


def feeds():
    rng = np.random.default_rng(11)
    return {"f": (rng.standard_normal(SHAPE) * 4).astype(np.float32),
            "i": rng.integers(-50, 50, SHAPE).astype(np.int64),
            "j": rng.integers(-50, 50, SHAPE).astype(np.int32),
            "b": rng.integers(0, 2, SHAPE).astype(bool)}


class Cases:
    """Nodes and initializers of the one model; each case adds an output."""

    def __init__(self):
        self.nodes, self.inits, self.outputs = [], [], []

    def const(self, value, dtype=np.int64):
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    def node(self, op, inputs, **attributes):
        name = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attributes))
        return name

    def output(self, op, inputs, **attributes):
        self.outputs.append(self.node(op, inputs, **attributes))

    def slice(self, x, starts, ends, axes, steps):
        return self.node("Slice", [x, self.const(starts), self.const(ends), self.const(axes),
                                   self.const(steps)])


def build_cases():
    c = Cases()
    # Running sums: every exclusive/reverse combination, both axes, each type.
    for x in "fij":
        for exclusive in (0, 1):
            for reverse in (0, 1):
                c.output("CumSum", [x, c.const(1)], exclusive=exclusive, reverse=reverse)
    c.output("CumSum", ["f", c.const(0, np.int32)])
    c.output("CumSum", ["i", c.const(-2)], reverse=1)
    c.output("CumSum", [c.slice("f", [0], [1], [1], [1]), c.const(1)], exclusive=1)
    # Integer arithmetic, broadcast against constants.
    for x, dtype in (("i", np.int64), ("j", np.int32)):
        row = c.const(np.arange(10) - 4, dtype)
        for op in ("Add", "Sub", "Mul"):
            c.output(op, [x, row])
        c.output("Mul", [x, x])
        c.output("Abs", [x])
        c.output("Neg", [x])
        c.output("Max", [x, row])
        c.output("Min", [x, c.const([[3], [-3], [0]], dtype), row])
    c.output("Where", ["b", "i", c.const(7)])
    c.output("Where", ["b", "j", "j"])
    # Integer division at run time: Div truncates, Mod takes the divisor's
    # sign (fmod=0) or the dividend's (fmod=1); divisors of both signs.
    for x, dtype in (("i", np.int64), ("j", np.int32)):
        positive = c.node("Add", [c.node("Abs", [x]), c.const(1, dtype)])
        divisor = c.node("Where", ["b", positive, c.node("Neg", [positive])])
        steps = c.const([3, -3, 7, -7, 1, -1, 2, 50, -5, 64], dtype)
        for denominator in (divisor, steps):
            c.output("Div", [x, denominator])
            for fmod in (0, 1):
                c.output("Mod", [x, denominator], fmod=fmod)
        c.output("Mod", [c.const([[7], [-7], [0]], dtype), divisor])
    # Casts: float to integers truncates towards zero; anything nonzero is true.
    for x, to in (("f", TensorProto.INT64), ("f", TensorProto.INT32), ("f", TensorProto.BOOL),
                  ("i", TensorProto.BOOL), ("i", TensorProto.INT32), ("j", TensorProto.INT64),
                  ("b", TensorProto.INT32), ("b", TensorProto.FLOAT), ("i", TensorProto.FLOAT),
                  ("j", TensorProto.BOOL)):
        c.outputs.append(c.node("Cast", [x], to=to))
    # RoBERTa's position ids: a mask's running sum, masked, plus an offset.
    mask = c.node("Cast", [c.node("Not", [c.node("Equal", ["j", c.const(0, np.int32)])])],
                  to=TensorProto.INT32)
    summed = c.node("Mul", [c.node("CumSum", [mask, c.const(1)]), mask])
    c.output("Add", [c.node("Cast", [summed], to=TensorProto.INT64), c.const(1)])
    # Strided slices, forwards and backwards, of each type.
    for x in "fijb":
        c.outputs.append(c.slice(x, [0], [10], [1], [2]))
        c.outputs.append(c.slice(x, [-1, -1], [-2**63, -11], [0, 1], [-1, -3]))
    c.outputs.append(c.slice("f", [1, 1], [3, 8], [0, 1], [1, 3]))
    c.outputs.append(c.slice("f", [0, 9], [3, 0], [0, 1], [2, -4]))
    c.outputs.append(c.slice("f", [0], [10], [1], [20]))
    # Scatters with constant indices: whole rows, and single elements.
    c.output("ScatterND", ["f", c.const([[2], [0]]), c.slice("f", [0], [2], [0], [1])])
    c.output("ScatterND", ["i", c.const([[2, 3], [0, 9], [-1, 0]]), c.const([5, 6, 7])])
    c.output("ScatterND", ["b", c.const([[1]]), c.node("Not", [c.slice("b", [1], [2], [0],
                                                                          [1])])])
    # Indices computed at import: a Concat along the last axis of [2, 1]
    # columns (Swin's window-mask scatter).
    rows = c.node("Concat", [c.const([[2], [0]]), c.const([[3], [9]])], axis=-1)
    c.output("ScatterND", ["i", rows, c.const([5, 6])])
    # Dropout in training mode with a ratio of 0 passes its input through.
    c.output("Dropout", ["f", c.const(0.0, np.float32), c.const(True, bool)])
    # Broadcasts of integers and bools.
    c.output("Expand", [c.slice("i", [0], [1], [0], [1]), c.const([2, 3, 10])])
    c.output("Expand", [c.slice("b", [0], [1], [1], [1]), c.const([3, 4])])
    # Folded at import: Mod both ways, a transpose and a backwards slice of
    # a constant matrix.
    for fmod in (0, 1):
        rest = c.node("Mod", [c.const([7, -7, 7, -7, 0, 9, -9, 2, 3, 1]),
                              c.const([3, 3, -3, -3, 5, 4, 4, -5, 3, 7])], fmod=fmod)
        c.output("Add", ["i", rest])
    matrix = c.node("Transpose", [c.const(np.arange(10).reshape(2, 5))], perm=[1, 0])
    backwards = c.slice(matrix, [-1], [-2**63], [0], [-1])
    c.output("Add", ["i", c.node("Reshape", [backwards, c.const([10])])])
    return c


def model_of(c, opset=17):
    """The cases' model, each output typed as ONNX's shape inference says."""
    inputs = [helper.make_tensor_value_info(n, t, SHAPE) for n, t in TYPES.items()]
    untyped = helper.make_model(helper.make_graph(c.nodes, "index_ops", inputs, [], c.inits),
                                opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = {v.name: v for v in
                onnx.shape_inference.infer_shapes(untyped).graph.value_info}
    graph = helper.make_graph(c.nodes, "index_ops", inputs,
                              [inferred[name] for name in c.outputs], c.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def mismatches(c, ours, expected):
    """(op, output, ...) of each case that differs from onnxruntime."""
    wrong = []
    for name in c.outputs:
        node = next(n for n in c.nodes if n.output[0] == name)
        got, want = ours[name], expected[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            wrong.append((node.op_type, name, got.shape, want.shape, got.dtype, want.dtype))
        elif want.dtype == np.float32:
            # Running sums add in another order than onnxruntime's loop.
            if np.max(np.abs(got - want)) > 1e-5 * max(1.0, float(np.max(np.abs(want)))):
                wrong.append((node.op_type, name, got.tolist(), want.tolist()))
        elif not np.array_equal(got, want):
            wrong.append((node.op_type, name, got.tolist(), want.tolist()))
    return wrong


def test_every_case_matches_onnxruntime(flowc, tmp_path):
    c = build_cases()
    model = save(model_of(c), tmp_path / "index_ops.onnx")
    flowc.submit(model)
    inputs = feeds()
    ours = flowc.execute(model.with_suffix(".fca"), inputs)
    assert not mismatches(c, ours, onnxruntime_outputs(model, inputs))
    assert len(c.outputs) == 79


def test_every_case_compiles_for_cuda_and_matches_there(flowc, tmp_path):
    """The generated kernels assemble with ptxas; on a GPU they run."""
    skip_without_cuda_toolkit()
    c = build_cases()
    model = save(model_of(c), tmp_path / "index_ops.onnx")
    target, why_not = device_target()
    artifact = tmp_path / "index_ops_cuda.fca"
    flowc.submit(model, artifact, "--target", target or "cuda:sm_90")
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    inputs = feeds()
    assert not mismatches(c, flowc.execute(artifact, inputs),
                          onnxruntime_outputs(model, inputs))


def refused_model(tmp_path, name, node, inits=(), inputs=("f",)):
    graph = helper.make_graph(
        [node], "refused", [helper.make_tensor_value_info(n, TYPES[n], SHAPE) for n in inputs],
        [helper.make_tensor_value_info(node.output[0], TensorProto.UNDEFINED, None)],
        list(inits))
    path = tmp_path / f"{name}.onnx"
    # Unchecked: ONNX's checker refuses some of these itself.
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def ints(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


REFUSED = {
    "cumsum_runtime_axis": (helper.make_node("CumSum", ["f", "i"], ["y"], name="n"), [],
                            ("f", "i"), UNSUPPORTED, "axis must be a constant integer"),
    "cumsum_bool": (helper.make_node("CumSum", ["b", "a"], ["y"], name="n"), [ints("a", 0)],
                    ("b",), UNSUPPORTED, "CumSum is supported on float32, int32 and int64"),
    "scatter_runtime_tuple_too_long": (
        helper.make_node("ScatterND", ["f", "i", "f"], ["y"], name="n"), [], ("f", "i"),
        BAD, "indices of shape [3,10] must end in a dimension in [1, 2]"),
    "scatter_out_of_range": (
        helper.make_node("ScatterND", ["f", "k", "u"], ["y"], name="n"),
        [ints("k", [[3]]), numpy_helper.from_array(np.ones((1, 10), np.float32), "u")],
        ("f",), BAD, "index 3 (update 0) is out of range for axis 0 of [3,10]"),
    "scatter_wrong_updates": (
        helper.make_node("ScatterND", ["f", "k", "u"], ["y"], name="n"),
        [ints("k", [[1]]), numpy_helper.from_array(np.ones((2, 10), np.float32), "u")],
        ("f",), BAD, "updates have shape [2,10]; indices [1,1] into data [3,10] need [1,10]"),
    "mod_float_runtime": (helper.make_node("Mod", ["f", "f"], ["y"], name="n", fmod=1), [],
                          ("f",), UNSUPPORTED,
                          "Mod at run time is supported on int32 and int64 only"),
    "div_bool": (helper.make_node("Div", ["b", "b"], ["y"], name="n"), [], ("b",),
                 UNSUPPORTED, "Div is supported on float32, int32 and int64 only"),
    "add_mixed": (helper.make_node("Add", ["i", "j"], ["y"], name="n"), [], ("i", "j"),
                  BAD, "inputs differ in type (int64 and int32)"),
    "concat_mixed": (helper.make_node("Concat", ["i", "j"], ["y"], name="n", axis=0), [],
                     ("i", "j"), BAD, "inputs differ in type (int64 and int32)"),
    "pad_reflect_past_the_axis": (
        helper.make_node("Pad", ["f", "p"], ["y"], name="n", mode="reflect"),
        [ints("p", [0, 10, 0, 0])], ("f",), BAD,
        "pads 10 and 0 of axis 1 exceed what mode 'reflect' can take from its 10 elements"),
    "pad_wrap_twice_around": (
        helper.make_node("Pad", ["f", "p"], ["y"], name="n", mode="wrap"),
        [ints("p", [0, 11, 0, 0])], ("f",), UNSUPPORTED,
        "wrap pads 11 and 0 of axis 1 go around its 10 elements more than once"),
    "pad_unknown_mode": (helper.make_node("Pad", ["f", "p"], ["y"], name="n", mode="mirror"),
                         [ints("p", [0, 1, 0, 1])], ("f",), BAD,
                         "mode 'mirror' is not one of constant, reflect, edge, wrap"),
    "slice_step_zero": (helper.make_node("Slice", ["f", "s", "e", "a", "z"], ["y"], name="n"),
                        [ints("s", [0]), ints("e", [5]), ints("a", [1]), ints("z", [0])],
                        ("f",), BAD, "steps[0] is 0"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_is_refused_fails_in_one_line_naming_the_node(flowc, tmp_path, case):
    node, inits, inputs, code, message = REFUSED[case]
    model = refused_model(tmp_path, case, node, inits, inputs)
    result = flowc.run("submit", model, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "node 'n' (" in result.stderr and message in result.stderr, result.stderr
    assert not (tmp_path / "out.fca").exists()


def test_cast_of_an_out_of_range_index_still_fails_the_gather(flowc, tmp_path):
    """A float cast to an index keeps the run-time check: 1e3 truncated
    is 1000, outside a 10-row table."""
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    nodes = [helper.make_node("Cast", ["f"], ["k"], to=TensorProto.INT64),
             helper.make_node("Gather", ["table", "k"], ["y"], name="lookup")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("f", TensorProto.FLOAT,
                                                                         [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                              [table])
    model = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                   ir_version=8), tmp_path / "g.onnx")
    flowc.submit(model)
    good = {"f": np.array([2.9, -0.5, 9.99], np.float32)}
    assert np.array_equal(flowc.execute(model.with_suffix(".fca"), good)["y"],
                          onnxruntime_outputs(model, good)["y"])
    np.save(tmp_path / "bad.npy", np.array([1.0, 1e3, 0.0], np.float32))
    result = flowc.run("run", model.with_suffix(".fca"), "--input", f"f={tmp_path / 'bad.npy'}",
                       "--output-dir", tmp_path / "out", check=False)
    assert result.returncode == BAD, result.stderr
    assert "node 'lookup' (Gather): an index is outside [-10, 9]" in result.stderr


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_a_zero_divisor_fails_the_run_and_the_lowest_value_wraps(flowc, tmp_path, dtype):
    """Integer Div and Mod by zero would trap the process: the run fails
    naming the node instead, and the daemon and the next run go on. The
    most negative value divided by -1 (which traps too) wraps to itself."""
    kind = TensorProto.INT64 if dtype == np.int64 else TensorProto.INT32
    nodes = [helper.make_node("Div", ["a", "d"], ["q"], name="quotient"),
             helper.make_node("Mod", ["a", "d"], ["r"], name="remainder", fmod=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, kind, [4])
                                           for n in "ad"],
                              [helper.make_tensor_value_info(n, kind, [4]) for n in "qr"])
    model = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                   ir_version=8), tmp_path / "g.onnx")
    flowc.submit(model)
    lowest = np.iinfo(dtype).min
    good = {"a": np.array([7, -7, lowest, 5], dtype), "d": np.array([2, 2, -1, -3], dtype)}
    ours = flowc.execute(model.with_suffix(".fca"), good)
    assert ours["q"].tolist() == [3, -3, lowest, -1]
    assert ours["r"].tolist() == [1, -1, 0, 2]
    np.save(tmp_path / "a.npy", good["a"])
    np.save(tmp_path / "zero.npy", np.array([2, 0, 1, 1], dtype))
    result = flowc.run("run", model.with_suffix(".fca"), "--input", f"a={tmp_path / 'a.npy'}",
                       "--input", f"d={tmp_path / 'zero.npy'}", "--output-dir",
                       tmp_path / "out", check=False)
    assert result.returncode == BAD, result.stderr
    assert "node 'quotient' (Div): a divisor is zero" in result.stderr, result.stderr
    assert flowc.execute(model.with_suffix(".fca"), good)["q"].tolist() == [3, -3, lowest, -1]


def gather_elements_model(data_type, index_type, data_shape, index_shape, axis,
                          constant_indices=None):
    inputs = [helper.make_tensor_value_info("data", data_type, data_shape)]
    initializers = []
    if constant_indices is None:
        inputs.append(helper.make_tensor_value_info("idx", index_type, index_shape))
    else:
        initializers.append(numpy_helper.from_array(constant_indices, "idx"))
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["data", "idx"], ["y"], name="pick", axis=axis)],
        "g", inputs, [helper.make_tensor_value_info("y", data_type, index_shape)],
        initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=8)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_gather_elements_matches_onnxruntime(flowc, tmp_path, axis, dtype):
    """torch.gather's export: run-time indices (negative ones too) into any
    axis, shorter than the data off it, for each data type."""
    rng = np.random.default_rng(5)
    data_shape, index_shape = [3, 4, 5], [2, 3, 4]
    index_shape[axis] = 6
    kind = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64,
            np.int32: TensorProto.INT32}[dtype]
    path = save(gather_elements_model(kind, TensorProto.INT64, data_shape, index_shape, axis),
                tmp_path / "g.onnx")
    extent = data_shape[axis]
    inputs = {"data": (rng.standard_normal(data_shape) * 100).astype(dtype),
              "idx": rng.integers(-extent, extent, index_shape).astype(np.int64)}
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), inputs)["y"]
    expected = onnxruntime_outputs(path, inputs)["y"]
    assert ours.dtype == expected.dtype
    np.testing.assert_array_equal(ours, expected)


def test_gather_elements_indices_out_of_range(flowc, tmp_path):
    """Constant indices are checked at compile time (exit 3), run-time ones
    as the graph runs (the run fails, exit 3)."""
    constant = np.array([[0, 2, -1], [1, 0, 0]], np.int32)
    path = save(gather_elements_model(TensorProto.FLOAT, TensorProto.INT32, [2, 3], [2, 3], 1,
                                      constant), tmp_path / "constant.onnx")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    flowc.submit(path)
    assert flowc.execute(path.with_suffix(".fca"), {"data": data})["y"].tolist() == \
        [[0, 2, 2], [4, 3, 3]]
    bad = gather_elements_model(TensorProto.FLOAT, TensorProto.INT32, [2, 3], [2, 3], 1,
                                np.array([[0, 1, 2], [0, -4, 0]], np.int32))
    (tmp_path / "bad.onnx").write_bytes(bad.SerializeToString())
    result = flowc.run("submit", tmp_path / "bad.onnx", "-o", tmp_path / "bad.fca", check=False)
    assert result.returncode == BAD, result.stderr
    assert "index -4 is out of range for axis 1 of [2,3]" in result.stderr, result.stderr
    path = save(gather_elements_model(TensorProto.FLOAT, TensorProto.INT64, [2, 3], [2, 3], 1),
                tmp_path / "runtime.onnx")
    flowc.submit(path)
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "idx.npy", np.array([[0, 1, 2], [3, 0, 0]], np.int64))
    result = flowc.run("run", path.with_suffix(".fca"), "--input", f"data={tmp_path / 'data.npy'}",
                       "--input", f"idx={tmp_path / 'idx.npy'}", "--output-dir",
                       tmp_path / "out", check=False)
    assert result.returncode == BAD, result.stderr
    assert "node 'pick' (GatherElements): an index is outside [-3, 2], the range of axis 1" \
        in result.stderr, result.stderr


@pytest.mark.parametrize("index_shape, message", [
    ([2, 3, 1], "indices [2,3,1] and data [2,3] differ in rank"),
    ([3, 3], "indices [3,3] are longer than data [2,3] along axis 0"),
])
def test_gather_elements_malformed_indices_are_refused(flowc, tmp_path, index_shape, message):
    model = gather_elements_model(TensorProto.FLOAT, TensorProto.INT64, [2, 3], index_shape, 1)
    (tmp_path / "bad.onnx").write_bytes(model.SerializeToString())
    result = flowc.run("submit", tmp_path / "bad.onnx", "-o", tmp_path / "bad.fca", check=False)
    assert result.returncode == BAD, result.stderr
    assert "node 'pick' (GatherElements): " + message in result.stderr, result.stderr
