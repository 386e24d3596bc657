"""Values the graph cannot take fail the run, naming the node, as
onnxruntime's do: a Gather index out of range at run time (token ids past
the vocabulary) neither reads outside the table nor returns what was there.
A bool .npy reads as numpy reads it."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (assert_close, device_target, onnxruntime_outputs, save,
                      skip_without_cuda_toolkit)

BAD = 3
TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)


def two_gathers_model():
    """An embedding lookup (int64 ids into a [10, 4] weight) and a gather
    along axis 1 of an input (int32 indices into 5 columns)."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0),
         helper.make_node("Gather", ["x", "cols"], ["picked"], name="pick", axis=1)], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5]),
         helper.make_tensor_value_info("cols", TensorProto.INT32, [4])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("picked", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(TABLE, "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def compiled(flowc, tmp_path):
    model = save(two_gathers_model(), tmp_path / "gathers.onnx")
    flowc.submit(model)
    return flowc, model, model.with_suffix(".fca")


def feeds(ids=(0, 9, -1, -10, 3, 4), cols=(0, 4, -1, -5)):
    return {"ids": np.array(ids, dtype=np.int64).reshape(2, 3),
            "x": np.arange(15, dtype=np.float32).reshape(3, 5),
            "cols": np.array(cols, dtype=np.int32)}


def run(flowc, artifact, tmp_path, inputs):
    args = []
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    return flowc.run("run", artifact, *args, "--output-dir", tmp_path / "out", check=False)


def test_indices_in_range_match_onnxruntime(compiled):
    """Negative indices count from the end; the checks change nothing."""
    flowc, model, artifact = compiled
    expected = onnxruntime_outputs(model, feeds())
    actual = flowc.execute(artifact, feeds())
    for name in ("rows", "picked"):
        assert_close(actual[name], expected[name], rtol=0)


@pytest.mark.parametrize("ids", [
    (0, 10, 0, 0, 0, 0),            # one past the end
    (0, 0, 0, -11, 0, 0),           # one before the start
    (2**40, 0, 0, 0, 0, 0),         # an int32 cast would make it 0
    (0, 0, 0, 0, 0, -2**63),
    (0, 0, 10**9, 0, 0, 0),         # far outside: read past the mapping
])
def test_an_index_out_of_range_fails_the_run_naming_the_gather(compiled, tmp_path, ids):
    flowc, model, artifact = compiled
    with pytest.raises(Exception, match="out of data bounds|indices element out of"):
        ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
            None, feeds(ids=ids))
    result = run(flowc, artifact, tmp_path, feeds(ids=ids))
    assert result.returncode == BAD, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert ("node 'embed' (Gather): an index is outside [-10, 9], the range of axis 0 "
            "of [10,4]") in result.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_each_gather_has_its_own_check(compiled, tmp_path):
    flowc, _, artifact = compiled
    result = run(flowc, artifact, tmp_path, feeds(cols=(0, 5, 0, 0)))
    assert result.returncode == BAD, result.stderr
    assert "node 'pick' (Gather): an index is outside [-5, 4], the range of axis 1 of [3,5]" \
        in result.stderr
    # A failed run leaves nothing behind: the next one is right.
    flowc, model, artifact = compiled
    assert_close(flowc.execute(artifact, feeds())["picked"],
                 onnxruntime_outputs(model, feeds())["picked"], rtol=0)


@pytest.mark.parametrize("level", ["-O0", "-O1"])
def test_the_checks_compile_for_cuda(flowc, tmp_path, level):
    """Their flags are device results like outputs: the kernels that compute
    them assemble with ptxas, and on a GPU a bad index fails the run there
    too."""
    skip_without_cuda_toolkit()
    model = save(two_gathers_model(), tmp_path / "gathers.onnx")
    target, why_not = device_target()
    artifact = tmp_path / "gathers_cuda.fca"
    flowc.submit(model, artifact, "--target", target or "cuda:sm_90", level)
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    expected = onnxruntime_outputs(model, feeds())
    assert_close(flowc.execute(artifact, feeds())["rows"], expected["rows"], rtol=0)
    result = run(flowc, artifact, tmp_path, feeds(ids=(0, 10, 0, 0, 0, 0)))
    assert result.returncode == BAD, result.stderr
    assert "node 'embed' (Gather): an index is outside [-10, 9]" in result.stderr


def test_a_bool_npy_reads_as_numpy_reads_it(flowc, tmp_path):
    """numpy takes any non-zero byte of a bool array as True; generated code
    would read only the lowest bit (Where took 2 as False, Not made 255
    into 254)."""
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "a", "b"], ["y"], name="choose"),
         helper.make_node("Not", ["c"], ["n"], name="invert")], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [4]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("n", TensorProto.BOOL, [4])])
    model = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                   ir_version=8), tmp_path / "where.onnx")
    flowc.submit(model)
    np.save(tmp_path / "c.npy", np.zeros(4, dtype=np.bool_))
    raw = (tmp_path / "c.npy").read_bytes()
    (tmp_path / "c.npy").write_bytes(raw[:-4] + bytes([2, 0, 255, 0x80]))
    mask = np.load(tmp_path / "c.npy")
    assert mask.tolist() == [True, False, True, True]
    a, b = np.arange(1, 5, dtype=np.float32), -np.arange(1, 5, dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    flowc.run("run", model.with_suffix(".fca"), "--input", f"c={tmp_path / 'c.npy'}",
              "--input", f"a={tmp_path / 'a.npy'}", "--input", f"b={tmp_path / 'b.npy'}",
              "--output-dir", tmp_path / "out")
    assert np.load(tmp_path / "out" / "y.npy").tolist() == np.where(mask, a, b).tolist()
    assert np.load(tmp_path / "out" / "n.npy").view(np.uint8).tolist() == [0, 1, 0, 0]
