"""TopK, Hardmax, OneHot, GatherND, ScatterElements, ScatterND and ArgMax's
select_last_index against onnxruntime: detection and beam-search top-k,
one-hot labels, torch's advanced indexing and scatter_ and index_put_
(the static KV cache's update at a run-time position). One model holds the
cases, one output each; exact comparison (these ops only pick and move,
except the scatters' additions). Run-time indices out of range fail the
run naming the node; what flowc refuses fails the compile in one line."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import device_target, onnxruntime_outputs, save, skip_without_cuda_toolkit

UNSUPPORTED, BAD = 4, 3
INPUTS = {
    "x": (TensorProto.FLOAT, [4, 6, 40]),    # scores
    "t": (TensorProto.INT64, [5, 30]),       # small integers: many ties
    "w": (TensorProto.FLOAT, [3, 25]),       # few distinct values: ties
    "k": (TensorProto.INT64, [4, 3, 2]),     # index tuples into x
    "e": (TensorProto.INT64, [4, 6, 5]),     # indices into x's last axis
    "p": (TensorProto.INT64, [1]),           # a cache position
    "cache": (TensorProto.FLOAT, [2, 3, 8, 4]),
    "new": (TensorProto.FLOAT, [2, 3, 1, 4]),
}


def feeds(seed=3):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal([4, 6, 40]).astype(np.float32),
        "t": rng.integers(-4, 5, [5, 30]).astype(np.int64),
        "w": rng.integers(0, 3, [3, 25]).astype(np.float32) * 0.5,
        "k": np.stack([rng.integers(-4, 4, [4, 3]), rng.integers(-6, 6, [4, 3])],
                      axis=-1).astype(np.int64),
        "e": rng.integers(-40, 40, [4, 6, 5]).astype(np.int64),
        "p": np.array([5], np.int64),
        "cache": rng.standard_normal([2, 3, 8, 4]).astype(np.float32),
        "new": rng.standard_normal([2, 3, 1, 4]).astype(np.float32),
    }


class Cases:
    def __init__(self):
        self.nodes, self.inits, self.outputs = [], [], []

    def const(self, value, dtype=np.int64):
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    def node(self, op, inputs, outputs=1, **attributes):
        names = [f"t{len(self.nodes)}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=names[0], **attributes))
        return names if outputs > 1 else names[0]

    def output(self, op, inputs, outputs=1, **attributes):
        names = self.node(op, inputs, outputs, **attributes)
        self.outputs.extend(names if outputs > 1 else [names])


def build_cases():
    c = Cases()
    # TopK: both directions, every axis; k <= 16 selects step by step,
    # larger k ranks (the whole axis: a sort). Ties go to the lower index.
    for largest in (1, 0):
        c.output("TopK", ["x", c.const([5])], 2, axis=-1, largest=largest)
        c.output("TopK", ["x", c.const([40])], 2, axis=2, largest=largest)
        c.output("TopK", ["x", c.const([3])], 2, axis=1, largest=largest)
        c.output("TopK", ["x", c.const([4])], 2, axis=0, largest=largest)
        c.output("TopK", ["t", c.const([7])], 2, axis=1, largest=largest)
        c.output("TopK", ["t", c.const([30])], 2, axis=-1, largest=largest)
        c.output("TopK", ["w", c.const([20])], 2, largest=largest)
        c.output("TopK", ["w", c.const([1])], 2, largest=largest)
    c.output("TopK", [c.node("Cast", ["t"], to=TensorProto.INT32), c.const([9])], 2)
    # Hardmax (opset 13: along one axis) and ArgMax/ArgMin's last index.
    for axis in (-1, 0, 1):
        c.output("Hardmax", ["x"], axis=axis)
    c.output("Hardmax", ["w"])
    for op in ("ArgMax", "ArgMin"):
        for axis in (0, 1):
            c.output(op, ["w"], axis=axis, select_last_index=1)
        c.output(op, ["w"], axis=1, keepdims=0, select_last_index=1)
    # OneHot: negative indices count from the end, those past depth match
    # nothing; float and integer values; float indices truncate.
    labels = c.node("Sub", [c.node("Slice", ["t", c.const([0]), c.const([4]), c.const([1])]),
                            c.const(1)])
    for axis in (-1, 0, 1):
        c.output("OneHot", [labels, c.const(4), c.const([0.25, 2.0], np.float32)], axis=axis)
    c.output("OneHot", [labels, c.const(3.0, np.float32), c.const([-1, 7], np.int32)])
    # Float indices: whole ones (negative too) match, 1.25 matches nothing
    # (onnxruntime and ONNX's reference; the text says they are cast).
    c.output("OneHot", [c.node("Div", ["w", c.const(-0.4, np.float32)]), c.const([5]),
                        c.const([0, 1])])
    c.output("OneHot", [c.node("Mul", ["w", c.const(-2.0, np.float32)]), c.const([5]),
                        c.const([0, 1])])
    # GatherND: run-time tuples (negative ones too), full and partial;
    # batch_dims 1; constant tuples.
    c.output("GatherND", ["x", "k"])
    c.output("GatherND", ["x", c.node("Slice", ["k", c.const([0]), c.const([1]),
                                                 c.const([2])])])
    c.output("GatherND", ["x", c.node("Slice", ["e", c.const([0]), c.const([1]),
                                                 c.const([2])])], batch_dims=2)
    c.output("GatherND", ["x", c.node("Slice", ["k", c.const([1]), c.const([2]),
                                                 c.const([2])])], batch_dims=1)
    c.output("GatherND", ["t", c.const([[[1, 2], [-1, -30]], [[4, 0], [0, 29]]])])
    c.output("GatherND", ["x", c.const([[[0], [5]], [[2], [2]], [[1], [0]], [[3], [4]]])],
             batch_dims=1)
    # ScatterElements: run-time indices, replacing and adding; constant
    # ones with duplicates under every reduction.
    c.output("ScatterElements", ["x", "e", c.node("Slice", ["x", c.const([0]), c.const([5]),
                                                           c.const([2])])], axis=2)
    row = c.node("Slice", ["x", c.const([0]), c.const([5]), c.const([2])])
    for reduction in ("add", "mul", "max", "min"):
        c.output("ScatterElements", ["x", "e", row], axis=-1, reduction=reduction)
    corner = c.node("Slice", ["t", c.const([0, 0]), c.const([4, 3]), c.const([0, 1])])
    for reduction in ("add", "max"):
        c.output("ScatterND", ["t", "k", corner], reduction=reduction)
    duplicates = c.const([[0, 2, 0, -1, 2], [3, 3, 3, 0, 1]])
    updates = c.const(np.arange(10, dtype=np.float32).reshape(2, 5) - 4.5, np.float32)
    for reduction in ("none", "add", "mul", "max", "min"):
        c.output("ScatterElements", ["w", duplicates, updates], axis=1, reduction=reduction)
    c.output("ScatterElements", ["t", c.const([[1, 0, 2]] * 2), c.const([[7, 8, 9]] * 2)],
             axis=0, reduction="max")
    # ScatterND: the KV cache's update at a run-time position, and
    # reductions over constant duplicate rows.
    position = c.node("Reshape", ["p", c.const([1, 1])])
    batch_heads = c.const(np.array([[b, h] for b in range(2) for h in range(3)])
                          .reshape(2, 3, 1, 2))
    tuples = c.node("Concat", [batch_heads, c.node("Expand", [position, c.const([2, 3, 1, 1])])],
                    axis=-1)
    c.output("ScatterND", ["cache", tuples, "new"])
    c.output("ScatterND", ["t", c.const([[1], [1], [3]]), c.node("Slice", ["t", c.const([0]),
                                                                           c.const([3]),
                                                                           c.const([0])])],
             reduction="add")
    for reduction in ("mul", "max", "min"):
        c.output("ScatterND", ["w", c.const([[2, 24], [2, 24], [0, 0]]),
                               c.const([2.5, -1.0, 3.0], np.float32)], reduction=reduction)
    first = c.node("Slice", ["x", c.const([0]), c.const([1]), c.const([0])])
    c.output("ScatterND", ["x", c.node("Slice", ["k", c.const([0]), c.const([1]),
                                                  c.const([2])]),
                           c.node("Expand", [first, c.const([4, 3, 6, 40])])],
             reduction="add")
    return c


def model_of(c, opset=18):
    """The cases' model, each output typed as ONNX's shape inference says."""
    inputs = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in INPUTS.items()]
    untyped = helper.make_model(helper.make_graph(c.nodes, "selection", inputs, [], c.inits),
                                opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = {v.name: v for v in
                onnx.shape_inference.infer_shapes(untyped, strict_mode=True).graph.value_info}
    graph = helper.make_graph(c.nodes, "selection", inputs,
                              [inferred[name] for name in c.outputs], c.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def mismatches(c, ours, expected):
    wrong = []
    for name in c.outputs:
        node = next(n for n in c.nodes if name in n.output)
        got, want = ours[name], expected[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            wrong.append((node.op_type, name, got.shape, want.shape, got.dtype, want.dtype))
        elif want.dtype == np.float32 and node.op_type in ("ScatterElements", "ScatterND"):
            # Additions of several updates: onnxruntime adds one at a time.
            if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
                wrong.append((node.op_type, name, got.tolist(), want.tolist()))
        elif not np.array_equal(got, want):
            wrong.append((node.op_type, name, got.tolist(), want.tolist()))
    return wrong


def test_every_case_matches_onnxruntime(flowc, tmp_path):
    c = build_cases()
    model = save(model_of(c), tmp_path / "selection.onnx")
    flowc.submit(model)
    for seed in (3, 4):
        inputs = feeds(seed)
        ours = flowc.execute(model.with_suffix(".fca"), inputs)
        assert not mismatches(c, ours, onnxruntime_outputs(model, inputs))
    assert len(c.outputs) == 75


def test_every_case_compiles_for_cuda_and_matches_there(flowc, tmp_path):
    """The generated kernels assemble with ptxas; on a GPU they run."""
    skip_without_cuda_toolkit()
    c = build_cases()
    model = save(model_of(c), tmp_path / "selection.onnx")
    target, why_not = device_target()
    artifact = tmp_path / "selection_cuda.fca"
    flowc.submit(model, artifact, "--target", target or "cuda:sm_90")
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    inputs = feeds()
    assert not mismatches(c, flowc.execute(artifact, inputs),
                          onnxruntime_outputs(model, inputs))


def test_importer_kernels_run_and_o0_inlines_their_loops(flowc, tmp_path):
    """TopK's order and the run-time scatters are library calls (`topk` and
    `scatter` in the profile: flowc's own selection and row scatter); -O0
    inlines each call's TOSA body instead. Both give onnxruntime's outputs
    for every case of the model."""
    c = build_cases()
    model = save(model_of(c), tmp_path / "selection.onnx")
    inputs = feeds(5)
    expected = onnxruntime_outputs(model, inputs)
    constant = {init.name for init in c.inits}
    runtime_scatters = [n for n in c.nodes if n.op_type in ("ScatterND", "ScatterElements")
                        and n.input[1] not in constant]
    assert runtime_scatters
    for level in ("-O2", "-O0"):
        artifact = tmp_path / f"selection{level}.fca"
        flowc.submit(model, artifact, level)
        assert not mismatches(c, flowc.execute(artifact, inputs), expected), level
        report = json.loads(flowc.run("run", artifact, *flowc.input_args(artifact, inputs),
                                      "--profile", "--json").stdout)
        calls = report["profile"]["calls"]
        kernels = {kind: [call for call in calls if call["kind"] == kind]
                   for kind in ("topk", "scatter")}
        if level == "-O0":
            assert not kernels["topk"] and not kernels["scatter"]
            continue
        # One kernel per TopK node and per scatter at run-time indices.
        assert len(kernels["topk"]) == sum(n.op_type == "TopK" for n in c.nodes)
        assert len(kernels["scatter"]) == len(runtime_scatters)
        assert all(call["ops"] == ["TopK"] for call in kernels["topk"])
        assert {call["implementation"] for call in kernels["topk"]} == {"flowc:select"}
        assert {call["implementation"] for call in kernels["scatter"]} == {"flowc:scatter"}


def single_node_model(tmp_path, name, node, inputs, output_type, inits=(), opset=18):
    """TopK's second output (indices) is int64; every other output is
    `output_type`."""
    types = [TensorProto.INT64 if node.op_type == "TopK" and i == 1 else output_type
             for i in range(len(node.output))]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(node.output, types)],
        list(inits))
    path = tmp_path / f"{name}.onnx"
    # Unchecked: ONNX's checker refuses some of these itself.
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                ir_version=8), path)
    return path


def test_topk_opset_9_takes_k_as_an_attribute(flowc, tmp_path):
    path = single_node_model(tmp_path, "topk9",
                             helper.make_node("TopK", ["x"], ["v", "i"], name="n", k=3, axis=0),
                             {"x": (TensorProto.FLOAT, [7, 2])}, TensorProto.FLOAT, opset=9)
    flowc.submit(path)
    inputs = {"x": np.random.default_rng(1).standard_normal([7, 2]).astype(np.float32)}
    ours, theirs = flowc.execute(path.with_suffix(".fca"), inputs), onnxruntime_outputs(path,
                                                                                        inputs)
    assert np.array_equal(ours["v"], theirs["v"]) and np.array_equal(ours["i"], theirs["i"])


def test_topk_puts_nan_with_the_largest(flowc, tmp_path):
    """NaN picks as +infinity would: first among the largest (after a real
    +infinity at a lower index), last among the smallest. The values are
    read back from the input, so NaN shows as NaN."""
    path = single_node_model(tmp_path, "nan", helper.make_node("TopK", ["x", "k"], ["v", "i"],
                                                               name="n"),
                             {"x": (TensorProto.FLOAT, [6])}, TensorProto.FLOAT,
                             [numpy_helper.from_array(np.array([6], np.int64), "k")])
    flowc.submit(path)
    x = np.array([1.0, np.nan, -2.0, np.inf, 5.0, -np.inf], np.float32)
    ours = flowc.execute(path.with_suffix(".fca"), {"x": x})
    assert ours["i"].tolist() == [1, 3, 4, 0, 2, 5]
    assert np.isnan(ours["v"][0]) and ours["v"][1:].tolist() == [np.inf, 5, 1, -2, -np.inf]


def run_fails(flowc, tmp_path, path, arrays):
    flowc.submit(path)
    args = []
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    return flowc.run("run", path.with_suffix(".fca"), *args, "--output-dir", tmp_path / "out",
                     check=False)


def test_run_time_indices_out_of_range_fail_the_run(flowc, tmp_path):
    """GatherND and ScatterElements read and write where run-time indices
    point: one outside its axis fails the run naming the node (exit 3), and
    the artifact keeps working."""
    gather = single_node_model(
        tmp_path, "gather", helper.make_node("GatherND", ["x", "k"], ["y"], name="pick"),
        {"x": (TensorProto.FLOAT, [3, 4]), "k": (TensorProto.INT64, [2, 2])},
        TensorProto.FLOAT)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = run_fails(flowc, tmp_path, gather, {"x": x, "k": np.array([[0, 1], [2, 4]])})
    assert result.returncode == BAD, result.stderr
    assert "node 'pick' (GatherND): an index is outside [-4, 3], the range of axis 1 of [3,4]" \
        in result.stderr, result.stderr
    good = {"x": x, "k": np.array([[0, 1], [-1, -4]], np.int64)}
    assert flowc.execute(gather.with_suffix(".fca"), good)["y"].tolist() == [1, 8]
    scatter = single_node_model(
        tmp_path, "scatter", helper.make_node("ScatterElements", ["x", "k", "u"], ["y"],
                                              name="put", axis=0),
        {"x": (TensorProto.FLOAT, [3, 4]), "k": (TensorProto.INT64, [1, 4]),
         "u": (TensorProto.FLOAT, [1, 4])}, TensorProto.FLOAT)
    result = run_fails(flowc, tmp_path, scatter, {"x": x, "k": np.array([[0, 1, -4, 2]]),
                                                  "u": np.ones([1, 4], np.float32)})
    assert result.returncode == BAD, result.stderr
    assert "node 'put' (ScatterElements): an index is outside [-3, 2], the range of axis 0" \
        in result.stderr, result.stderr


def ints(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


FLOATS = {"x": (TensorProto.FLOAT, [3, 10])}
REFUSED = {
    "topk_runtime_k": (helper.make_node("TopK", ["x", "k"], ["v", "i"], name="n"),
                       {**FLOATS, "k": (TensorProto.INT64, [1])}, [], UNSUPPORTED,
                       "k must be a constant integer of one element"),
    "topk_k_past_the_axis": (helper.make_node("TopK", ["x", "k"], ["v", "i"], name="n"), FLOATS,
                             [ints("k", [11])], BAD,
                             "k 11 is outside [0, 10], the extent of axis 1 of [3,10]"),
    "onehot_depth_zero": (helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n"),
                          {"i": (TensorProto.INT64, [3])}, [ints("d", 0), ints("v", [0, 1])],
                          BAD, "depth 0 is not positive"),
    "onehot_three_values": (helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n"),
                            {"i": (TensorProto.INT64, [3])},
                            [ints("d", 4), ints("v", [0, 1, 2])], BAD,
                            "values have shape [3]; OneHot takes [off, on], shape [2]"),
    "gathernd_tuple_too_long": (helper.make_node("GatherND", ["x", "k"], ["y"], name="n"),
                                FLOATS, [ints("k", [[0, 0, 0]])], BAD,
                                "indices [1,3] end in 3, outside [1, 2] for data [3,10]"),
    "gathernd_constant_out_of_range": (
        helper.make_node("GatherND", ["x", "k"], ["y"], name="n"), FLOATS,
        [ints("k", [[2, 10]])], BAD, "index 10 is out of range for axis 1 of [3,10]"),
    "scatter_bool_max": (
        helper.make_node("ScatterElements", ["b", "k", "b"], ["y"], name="n",
                         reduction="max"),
        {"b": (TensorProto.BOOL, [3, 10]), "k": (TensorProto.INT64, [3, 10])}, [], UNSUPPORTED,
        "a reduction needs float32, int32 or int64 data, not bool"),
    "scatter_unknown_reduction": (
        helper.make_node("ScatterND", ["x", "k", "u"], ["y"], name="n", reduction="sum"),
        FLOATS, [ints("k", [[0]]), numpy_helper.from_array(np.ones((1, 10), np.float32), "u")],
        BAD, "reduction 'sum' is not none, add, mul, max or min"),
    "scatter_too_many_to_one_row": (
        helper.make_node("ScatterND", ["x", "k", "u"], ["y"], name="n", reduction="add"),
        FLOATS, [ints("k", [[1]] * 300),
                 numpy_helper.from_array(np.ones((300, 10), np.float32), "u")],
        UNSUPPORTED, "300 updates reach one destination; at most 256"),
    "scatter_elements_updates_shape": (
        helper.make_node("ScatterElements", ["x", "k", "u"], ["y"], name="n"), FLOATS,
        [ints("k", [[0, 1]]), numpy_helper.from_array(np.ones((1, 3), np.float32), "u")], BAD,
        "updates [1,3] and indices [1,2] differ in shape"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_is_refused_fails_in_one_line_naming_the_node(flowc, tmp_path, case):
    node, inputs, inits, code, message = REFUSED[case]
    model = single_node_model(tmp_path, case, node, inputs, TensorProto.UNDEFINED, inits)
    result = flowc.run("submit", model, "-o", tmp_path / "out.fca", check=False)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "node 'n' (" in result.stderr and message in result.stderr, result.stderr
    assert not (tmp_path / "out.fca").exists()
