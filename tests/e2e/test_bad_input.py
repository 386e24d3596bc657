"""Bad input gets one clear line on stderr, a non-zero exit, and leaves the
cache exactly as it was."""
import hashlib
import pathlib
import sqlite3

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import make_models
from conftest import save


def cache_state(cache_dir: pathlib.Path):
    """Every CAS file with its content hash, plus every index row."""
    files = {str(p.relative_to(cache_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted((cache_dir / "cas").rglob("*")) if p.is_file()}
    with sqlite3.connect(cache_dir / "index.sqlite") as db:
        blobs = db.execute("SELECT digest, size FROM blobs ORDER BY digest").fetchall()
        actions = db.execute("SELECT kind, key, result FROM actions ORDER BY key").fetchall()
    return files, blobs, actions


def unsupported_op_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="act"),
         helper.make_node("LpNormalization", ["r"], ["y"], name="norm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def wrong_shape_model():
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="proj")], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def bad_attribute_model():
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], name="probs", axis=5)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def bfloat16_input_model():
    """numpy has no bfloat16: flowc carries it inside graphs only."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="act")], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def other_domain_model():
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], name="act", domain="com.microsoft")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


@pytest.fixture
def populated(flowc, tmp_path):
    """A daemon whose cache already holds a compiled model."""
    good = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "good.onnx")
    flowc.submit(good)
    return flowc, good


def write_case(tmp_path, case, good):
    path = tmp_path / f"{case}.onnx"
    data = good.read_bytes()
    if case == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif case == "garbage":
        path.write_bytes(b"\x08\x07\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff not onnx")
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "unsupported_op":
        path.write_bytes(unsupported_op_model().SerializeToString())
    elif case == "wrong_shapes":
        path.write_bytes(wrong_shape_model().SerializeToString())
    elif case == "wrong_field_type":
        # ModelProto.ir_version (field 1, a varint) sent as length-delimited.
        path.write_bytes(b"\x0a\x01x" + data)
    elif case == "bad_attribute":
        path.write_bytes(bad_attribute_model().SerializeToString())
    elif case == "unsupported_dtype":
        path.write_bytes(bfloat16_input_model().SerializeToString())
    elif case == "other_domain":
        path.write_bytes(other_domain_model().SerializeToString())
    return path


# Exit statuses (cli/Common.h): 3 bad input, 4 valid but unsupported.
BAD, UNSUPPORTED = 3, 4
EXPECTED = {
    "truncated": (BAD, "truncated"),
    "garbage": (BAD, "garbage.onnx"),
    "empty": (BAD, "empty file"),
    "missing": (BAD, "missing.onnx"),
    "wrong_field_type": (BAD, "ir_version: field 1 has wire type 2, expected 0"),
    "unsupported_op": (UNSUPPORTED, "node 'norm' (LpNormalization): unsupported op "
                                    "'LpNormalization' (domain 'ai.onnx', opset 17)"),
    "other_domain": (UNSUPPORTED, "node 'act' (com.microsoft.Gelu): unsupported op domain "
                                  "'com.microsoft'"),
    "bad_attribute": (BAD, "node 'probs' (Softmax): axis 5 is out of range for input [2,3]"),
    "unsupported_dtype": (UNSUPPORTED, "input 'x' has dtype bfloat16; supported: float32, "
                                       "float16"),
    "wrong_shapes": (BAD, "node 'proj' (MatMul): inner dimensions differ"),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_model_fails_cleanly(populated, tmp_path, case):
    flowc, good = populated
    before = cache_state(flowc.cache_dir)
    path = write_case(tmp_path, case, good)
    result = flowc.run("submit", path, "-o", tmp_path / "out.fca", check=False)
    exit_status, message = EXPECTED[case]
    assert result.returncode == exit_status, result.stderr
    assert result.stderr.startswith("flowc: error: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out.fca").exists()
    assert cache_state(flowc.cache_dir) == before
    # The daemon keeps serving.
    assert flowc.submit(good)["cache"] == "hit"


def test_run_rejects_a_corrupt_artifact(flowc, tmp_path):
    path = tmp_path / "bad.fca"
    path.write_bytes(b"FLOWCFCA" + b"\0" * 100)
    result = flowc.run("run", path, "--input", f"x={tmp_path / 'x.npy'}", check=False)
    assert result.returncode != 0
    assert "bad.fca" in result.stderr and result.stderr.startswith("flowc: error: ")


def test_run_rejects_a_non_float32_input(populated, tmp_path):
    flowc, good = populated
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), dtype=np.float64))
    result = flowc.run("run", good.with_suffix(".fca"), "--input",
                       f"image={tmp_path / 'x.npy'}", check=False)
    assert result.returncode != 0
    assert "'<f8' is not supported" in result.stderr
    np.save(tmp_path / "i.npy", np.zeros((1, 3, 32, 32), dtype=np.int64))
    result = flowc.run("run", good.with_suffix(".fca"), "--input",
                       f"image={tmp_path / 'i.npy'}", check=False)
    assert result.returncode == BAD
    assert "input 'image' is int64, the model expects float32" in result.stderr


def test_run_rejects_an_unknown_input_name(populated, tmp_path):
    flowc, good = populated
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), dtype=np.float32))
    result = flowc.run("run", good.with_suffix(".fca"), "--input", f"nope={tmp_path / 'x.npy'}",
                       check=False)
    assert result.returncode != 0
    assert "no input named 'nope'" in result.stderr or "missing input 'image'" in result.stderr



@pytest.mark.parametrize("inputs, message", [
    (["image=X", "image=X"], "--input 'image=X': input 'image' is given twice"),
    (["X", "image=X"], "--input 'image=X': input 'image' is given twice"),
    (["=X"], "--input '=X' has an empty NAME"),
])
def test_run_refuses_an_input_given_twice_or_unnamed(populated, tmp_path, inputs, message):
    """Keeping one of two files for an input would run on data nobody meant."""
    flowc, good = populated
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 32, 32), dtype=np.float32))
    args = [a for spec in inputs for a in ("--input", spec.replace("X", str(x)))]
    result = flowc.run("run", good.with_suffix(".fca"), *args, check=False)
    assert result.returncode == BAD, result.stderr
    assert message.replace("X", str(x)) in result.stderr

def test_unknown_target_is_a_usage_error(populated, tmp_path):
    flowc, good = populated
    result = flowc.run("submit", good, "--target", "tpu", check=False)
    assert result.returncode != 0
    assert "tpu" in result.stderr


def test_external_data_outside_the_model_directory_is_refused(flowc, tmp_path):
    model = make_models.make_cnn(np.random.default_rng(0))
    (tmp_path / "models").mkdir()
    onnx.save_model(model, tmp_path / "models" / "m.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    # Point every tensor at a file one level up.
    (tmp_path / "w.bin").write_bytes((tmp_path / "models" / "w.bin").read_bytes())
    m = onnx.load(tmp_path / "models" / "m.onnx", load_external_data=False)
    for init in m.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                entry.value = "../w.bin"
    onnx.save_model(m, tmp_path / "models" / "escape.onnx")
    result = flowc.run("submit", tmp_path / "models" / "escape.onnx", check=False)
    assert result.returncode != 0
    assert "external data location '../w.bin' escapes the model's directory" in result.stderr
    # A truncated external file names the tensor.
    (tmp_path / "models" / "w.bin").write_bytes(b"\0" * 100)
    result = flowc.run("submit", tmp_path / "models" / "m.onnx", check=False)
    assert result.returncode != 0 and "external data out of range" in result.stderr
