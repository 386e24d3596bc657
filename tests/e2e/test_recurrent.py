"""RNN, GRU and LSTM: single nodes over every direction, layout and
optional input (sequence lengths at run time and as constants, initial
states, peepholes, clip, linear_before_reset, input_forget, non-default
activations), compared with onnxruntime; torch's exports of recurrent
models (examples/export_recurrent.py); and the refusals."""
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (ROOT, assert_close, device_target, onnxruntime_outputs, save,
                      skip_without_cuda_toolkit)

UNSUPPORTED, BAD = 4, 3
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_model(op, seq=5, batch=3, size=4, hidden=6, direction="forward", layout=0,
                    bias=True, initial=False, lengths=None, peepholes=False,
                    outputs=("y", "y_h", "y_c"), seed=0, **attrs):
    """One `op` node; `lengths` is None, "input" (int32 fed at run time) or a
    constant list. Returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]

    def tensor(name, shape, scale=0.5):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name)

    x_shape = [batch, seq, size] if layout else [seq, batch, size]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    inits = [tensor("w", [dirs, gates * hidden, size]),
             tensor("r", [dirs, gates * hidden, hidden])]
    names = ["x", "w", "r", "", "", "", "", ""]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if bias:
        inits.append(tensor("b", [dirs, 2 * gates * hidden]))
        names[3] = "b"
    if lengths == "input":
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]))
        feeds["lens"] = rng.integers(1, seq + 1, batch).astype(np.int32)
        names[4] = "lens"
    elif lengths is not None:
        inits.append(numpy_helper.from_array(np.array(lengths, np.int32), "lens"))
        names[4] = "lens"
    if initial:
        for index, name in ((5, "h0"), (6, "c0")) if op == "LSTM" else ((5, "h0"),):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state))
            feeds[name] = rng.standard_normal(state).astype(np.float32)
            names[index] = name
    if peepholes:
        inits.append(tensor("p", [dirs, 3 * hidden]))
        names[7] = "p"
    while names[-1] == "":
        names.pop()
    y_shape = [batch, seq, dirs, hidden] if layout else [seq, dirs, batch, hidden]
    shapes = {"y": y_shape, "y_h": state, "y_c": state}
    count = 3 if op == "LSTM" else 2
    out_names = [name if name in outputs else "" for name in ("y", "y_h", "y_c")[:count]]
    while out_names[-1] == "":
        out_names.pop()
    node = helper.make_node(op, names, out_names, hidden_size=hidden, direction=direction,
                            layout=layout, **attrs)
    graph = helper.make_graph(
        [node], op.lower(), inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in out_names
         if n], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                              ir_version=8)
    return model, feeds


CASES = {
    "rnn_defaults": dict(op="RNN", bias=False),
    "rnn_relu_bidirectional_initial": dict(op="RNN", direction="bidirectional", initial=True,
                                           activations=["Relu", "Relu"]),
    "rnn_reverse_batch_first": dict(op="RNN", direction="reverse", layout=1, initial=True),
    "rnn_run_time_lengths": dict(op="RNN", direction="bidirectional", lengths="input"),
    "gru_defaults": dict(op="GRU"),
    "gru_linear_before_reset_bidirectional": dict(op="GRU", direction="bidirectional",
                                                  initial=True, linear_before_reset=1),
    "gru_linear_before_reset_no_bias": dict(op="GRU", bias=False, linear_before_reset=1),
    "gru_reverse_run_time_lengths": dict(op="GRU", direction="reverse", initial=True,
                                         lengths="input"),
    "gru_batch_first_constant_lengths": dict(op="GRU", layout=1, lengths=[5, 2, 4],
                                             direction="bidirectional"),
    "gru_clip": dict(op="GRU", clip=0.4, initial=True),
    "lstm_defaults": dict(op="LSTM", bias=False),
    "lstm_everything_bidirectional": dict(op="LSTM", direction="bidirectional", initial=True,
                                          lengths="input", peepholes=True),
    "lstm_reverse_peepholes_clip": dict(op="LSTM", direction="reverse", peepholes=True,
                                        clip=0.6),
    "lstm_batch_first_bidirectional": dict(op="LSTM", layout=1, direction="bidirectional",
                                           initial=True),
    "lstm_input_forget": dict(op="LSTM", input_forget=1, initial=True),
    "lstm_full_constant_lengths": dict(op="LSTM", lengths=[5, 5, 5]),
    "lstm_states_only": dict(op="LSTM", outputs=("y_h", "y_c"), lengths="input"),
    "lstm_sequence_only": dict(op="LSTM", outputs=("y",), direction="bidirectional"),
    "lstm_one_step_one_row": dict(op="LSTM", seq=1, batch=1, initial=True),
    "lstm_activations_with_parameters": dict(
        op="LSTM", direction="bidirectional",
        activations=["HardSigmoid", "ScaledTanh", "Affine", "Sigmoid", "Softsign", "Tanh"],
        activation_alpha=[0.3, 0.8, 0.9], activation_beta=[0.4, 1.2, 0.1]),
    "gru_activations_leaky_elu": dict(op="GRU", activations=["LeakyRelu", "Elu"],
                                      activation_alpha=[0.2, 0.7]),
    # onnxruntime's RNN reads alpha i for activation i (and aborts on a
    # shorter list); its GRU and LSTM, like flowc, hand the values in order
    # to the functions that take one. These lists read the same either way.
    "rnn_activations_thresholded": dict(op="RNN", activations=["ThresholdedRelu"],
                                        activation_alpha=[0.1]),
    "rnn_activations_softplus_softsign": dict(op="RNN", direction="bidirectional",
                                              activations=["Softplus", "Softsign"]),
    "rnn_activations_scaled_tanh_affine": dict(
        op="RNN", direction="bidirectional", activations=["ScaledTanh", "Affine"],
        activation_alpha=[1.5, 0.7], activation_beta=[0.6, 0.2]),
}


def batch_first_reference(tmp_path, case, feeds):
    """onnxruntime refuses layout=1: the outputs of the layout-0 node with
    the same weights (drawn alike) on the transposed inputs, transposed."""
    model, _ = recurrent_model(**dict(CASES[case], layout=0))
    path = save(model, tmp_path / "sequence_first.onnx")
    swapped = {name: np.swapaxes(value, 0, 1) if name in ("x", "h0", "c0") else value
               for name, value in feeds.items()}
    outputs = onnxruntime_outputs(path, swapped)
    return {name: value.transpose(2, 0, 1, 3) if name == "y" else np.swapaxes(value, 0, 1)
            for name, value in outputs.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_recurrent_node_matches_onnxruntime(flowc, tmp_path, case):
    model, feeds = recurrent_model(**CASES[case])
    path = save(model, tmp_path / f"{case}.onnx")
    flowc.submit(path, None, "-O", "3")
    ours = flowc.execute(path.with_suffix(".fca"), feeds)
    if CASES[case].get("layout"):
        reference = batch_first_reference(tmp_path, case, feeds)
    else:
        reference = onnxruntime_outputs(path, feeds)
    assert set(ours) == set(reference)
    for name, expected in reference.items():
        assert_close(ours[name], expected)


def test_run_time_lengths_change_the_result(flowc, tmp_path):
    model, feeds = recurrent_model("GRU", direction="bidirectional", lengths="input")
    path = save(model, tmp_path / "gru.onnx")
    flowc.submit(path)
    short = dict(feeds, lens=np.array([1, 2, 3], np.int32))
    ours = flowc.execute(path.with_suffix(".fca"), short)
    reference = onnxruntime_outputs(path, short)
    for name in reference:
        assert_close(ours[name], reference[name])
    full = flowc.execute(path.with_suffix(".fca"), dict(feeds, lens=np.full(3, 5, np.int32)))
    assert not np.allclose(full["y_h"], ours["y_h"])


@pytest.mark.parametrize("bad_lengths", [[0, 2, 3], [1, 6, 3], [-1, 1, 1]])
def test_run_time_lengths_out_of_range_fail_the_run(flowc, tmp_path, bad_lengths):
    model, feeds = recurrent_model("LSTM", lengths="input")
    path = save(model, tmp_path / "lstm.onnx")
    flowc.submit(path)
    np.save(tmp_path / "x.npy", feeds["x"])
    np.save(tmp_path / "lens.npy", np.array(bad_lengths, np.int32))
    result = flowc.run("run", path.with_suffix(".fca"), "--input", f"x={tmp_path / 'x.npy'}",
                       "--input", f"lens={tmp_path / 'lens.npy'}", "--output-dir",
                       tmp_path / "out", check=False)
    assert result.returncode == BAD, result.stderr
    assert "a sequence_lens value is outside [1, 5]" in result.stderr, result.stderr
    # The same artifact runs on good lengths afterwards.
    good = flowc.execute(path.with_suffix(".fca"), feeds)
    assert_close(good["y"], onnxruntime_outputs(path, feeds)["y"])


def refused(flowc, tmp_path, model, code, *needles):
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    result = flowc.run("submit", path, "-o", tmp_path / "bad.fca", check=False)
    assert result.returncode == code, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_refusals_name_the_problem(flowc, tmp_path):
    model, _ = recurrent_model("LSTM")
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(
        np.zeros([1, 24, 5], np.float32), "r"))
    refused(flowc, tmp_path, model, BAD, "R is [1,24,5]")
    model, _ = recurrent_model("GRU", direction="sideways")
    refused(flowc, tmp_path, model, BAD, "direction 'sideways'")
    model, _ = recurrent_model("RNN", hidden=6)
    next(a for a in model.graph.node[0].attribute if a.name == "hidden_size").i = 7
    refused(flowc, tmp_path, model, BAD, "hidden_size 7")
    model, _ = recurrent_model("RNN", activations=["Gelu"])
    refused(flowc, tmp_path, model, UNSUPPORTED, "activation 'Gelu' is not supported")
    model, _ = recurrent_model("GRU", activations=["Sigmoid"])
    refused(flowc, tmp_path, model, BAD, "activations lists 1 functions")
    model, _ = recurrent_model("LSTM", lengths=[5, 0, 2])
    refused(flowc, tmp_path, model, BAD, "sequence_lens[1] = 0 is outside [1, 5]")
    model, _ = recurrent_model("GRU", clip=-1.0)
    refused(flowc, tmp_path, model, BAD, "clip -1")
    # A sequence too long to unroll is refused before any op is built.
    model, _ = recurrent_model("RNN", seq=513, batch=1, size=1, hidden=1,
                               direction="bidirectional")
    refused(flowc, tmp_path, model, UNSUPPORTED,
            "513 steps x 2 directions unroll past the limit of 1024 steps")
    # The daemon is still serving.
    good, feeds = recurrent_model("RNN")
    path = save(good, tmp_path / "good.onnx")
    flowc.submit(path)


MODELS = ["lstm_classifier", "gru_tagger", "rnn_relu", "lstm_states"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("recurrent")
    subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_recurrent.py"),
                    str(root)], check=True, capture_output=True, text=True, timeout=600)
    return root


def model_inputs(model):
    return {name: np.load(model.with_name(f"{model.stem}_{name}.npy"))
            for name in ("tokens", "input", "h0", "c0")
            if model.with_name(f"{model.stem}_{name}.npy").exists()}


@pytest.mark.parametrize("name", MODELS)
def test_torch_recurrent_model_matches_onnxruntime(flowc, exported, name):
    model = exported / f"{name}.onnx"
    feeds = model_inputs(model)
    flowc.submit(model, None, "-O", "3")
    ours = flowc.execute(model.with_suffix(".fca"), feeds)
    reference = onnxruntime_outputs(model, feeds)
    for output, expected in reference.items():
        assert_close(ours[output], expected)
    # Another input gives another output.
    first = next(iter(feeds))
    other = dict(feeds, **{first: feeds[first][::-1].copy()})
    again = flowc.execute(model.with_suffix(".fca"), other)
    assert not np.allclose(again[next(iter(reference))], ours[next(iter(reference))])


@pytest.mark.parametrize("name", MODELS)
def test_torch_recurrent_model_compiles_for_cuda(flowc, exported, name):
    skip_without_cuda_toolkit()
    model = exported / f"{name}.onnx"
    target, why_not = device_target()
    artifact = model.with_name(f"{name}_cuda.fca")
    flowc.submit(model, artifact, "--target", target or "cuda:sm_90", "-O", "3")
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    feeds = model_inputs(model)
    ours = flowc.execute(artifact, feeds)
    for output, expected in onnxruntime_outputs(model, feeds).items():
        assert_close(ours[output], expected, rtol=1e-3)
