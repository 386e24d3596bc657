"""Search end to end (docs/search.md): measure tasks on the daemon's workers
record tuning results, a compile uses a record whatever its budget, records
move between caches with `flowc tuning export|import`, every candidate of a
convolution, a matrix product and a generated elementwise kernel computes
what -O0 does, the budget is honoured, and a measure task whose worker dies
is retried."""
import json
import os
import pathlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import Flowc, assert_close, onnxruntime_outputs, save


def tuning_model(path: pathlib.Path) -> pathlib.Path:
    """A convolution, a generated elementwise chain (Sin and Abs have no
    library epilogue) over 25k elements, and a matrix product."""
    rng = np.random.default_rng(7)

    def weight(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [weight("conv.w", (32, 16, 3, 3), 0.1), weight("conv.b", (32,), 0.1),
             weight("fc.w", (32 * 28 * 28, 64), 0.01), weight("fc.b", (64,), 0.1),
             numpy_helper.from_array(np.array([1, 32 * 28 * 28], dtype=np.int64), "flat")]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Sin", ["r"], ["s"]),
        helper.make_node("Abs", ["s"], ["a"]),
        helper.make_node("Mul", ["a", "r"], ["m"]),
        helper.make_node("Reshape", ["m", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "fc.w"], ["h"]),
        helper.make_node("Add", ["h", "fc.b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "tuning",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    return save(model, path)


def inputs():
    return {"x": np.random.default_rng(3).standard_normal((1, 16, 28, 28)).astype(np.float32)}


def records(flowc: Flowc) -> list:
    return json.loads(flowc.run("tuning", "ls", "--json").stdout)


def test_search_records_then_reuses_them(flowc, tmp_path):
    model = tuning_model(tmp_path / "m.onnx")
    first = flowc.submit(model, tmp_path / "searched.fca", "--search-budget", "30")
    search = first["search"]
    assert search["tunable_kernels"] >= 3, search
    assert search["measured_kernels"] == search["tunable_kernels"], search
    assert search["tuned_kernels"] == search["tunable_kernels"], search
    assert search["candidates_measured"] >= 2 * search["measured_kernels"], search
    kept = records(flowc)
    signatures = {r["signature"] for r in kept}
    assert len(signatures) == search["tunable_kernels"]
    assert any(s.startswith("library.conv2d") for s in signatures), signatures
    assert any(s.startswith("library.matmul") for s in signatures), signatures
    assert any(s.startswith("loop:") for s in signatures), signatures
    expected = onnxruntime_outputs(model, inputs())["y"]
    assert_close(flowc.execute(tmp_path / "searched.fca", inputs())["y"], expected)

    # No budget: the records decide, nothing is measured, and the artifact is
    # the one the search compile made (the same records, the same model).
    again = flowc.submit(model, tmp_path / "again.fca")
    assert again["search"]["measured_kernels"] == 0
    assert again["artifact_digest"] == first["artifact_digest"]
    # Searching again finds every kernel recorded.
    searched = flowc.submit(model, tmp_path / "third.fca", "--search-budget", "30")
    assert searched["search"]["measured_kernels"] == 0
    assert searched["search"]["tuned_kernels"] == search["tunable_kernels"]
    assert searched["artifact_digest"] == first["artifact_digest"]


def test_exported_records_serve_another_cache(flowc, tmp_path):
    model = tuning_model(tmp_path / "m.onnx")
    first = flowc.submit(model, tmp_path / "a.fca", "--search-budget", "30")
    exported = tmp_path / "records.json"
    flowc.run("tuning", "export", "-o", exported)

    other = Flowc(tmp_path / "other")
    other.tmp.mkdir()
    other.run("daemon", "start")
    try:
        untuned = other.submit(model, tmp_path / "untuned.fca")
        assert untuned["search"]["tuned_kernels"] == 0
        other.run("tuning", "import", exported)
        second = other.submit(model, tmp_path / "b.fca")
        assert second["search"]["measured_kernels"] == 0
        assert second["search"]["tuned_kernels"] == first["search"]["tunable_kernels"]
        # The same records make the same artifact.
        assert second["artifact_digest"] == first["artifact_digest"]
        assert records(other) == records(flowc)
    finally:
        other.run("daemon", "stop", check=False)


def forced(records_list: list, index: int) -> dict:
    """An export whose best, for every signature, is its index-th candidate
    (cycling): the artifact then runs exactly those candidates."""
    by_signature = {}
    for record in records_list:
        by_signature.setdefault(record["signature"], []).append(record)
    chosen = []
    for signature, candidates in sorted(by_signature.items()):
        candidates.sort(key=lambda r: r["candidate"])
        record = dict(candidates[index % len(candidates)])
        record["time_ns"] = 1
        record["measured_ms"] = record["measured_ms"] + 1
        chosen.append(record)
    return {"format": "flowc.tuning.v1", "records": chosen}


def test_every_candidate_computes_what_O0_does(flowc, tmp_path):
    model = tuning_model(tmp_path / "m.onnx")
    flowc.submit(model, tmp_path / "search.fca", "--search-budget", "exhaustive")
    measured = records(flowc)
    flowc.submit(model, tmp_path / "o0.fca", "-O0")
    reference = flowc.execute(tmp_path / "o0.fca", inputs())["y"]
    counts = {}
    for record in measured:
        counts[record["signature"]] = counts.get(record["signature"], 0) + 1
    assert max(counts.values()) >= 2, counts
    for index in range(max(counts.values())):
        cache = Flowc(tmp_path / f"forced{index}")
        cache.tmp.mkdir()
        document = tmp_path / f"forced{index}.json"
        document.write_text(json.dumps(forced(measured, index)))
        cache.run("daemon", "start")
        try:
            cache.run("tuning", "import", document)
            out = tmp_path / f"forced{index}.fca"
            result = cache.submit(model, out)
            assert result["search"]["tuned_kernels"] == len(counts), result["search"]
            assert_close(cache.execute(out, inputs())["y"], reference, rtol=1e-4)
        finally:
            cache.run("daemon", "stop", check=False)


def test_a_small_budget_ends_search_and_the_compile_succeeds(flowc, tmp_path):
    model = tuning_model(tmp_path / "m.onnx")
    result = flowc.submit(model, tmp_path / "small.fca", "--search-budget", "0.001")
    assert result["search"]["budget_ended"], result["search"]
    assert_close(flowc.execute(tmp_path / "small.fca", inputs())["y"],
                 onnxruntime_outputs(model, inputs())["y"])


def test_a_measure_task_whose_worker_dies_is_retried(tmp_path):
    marker = tmp_path / "crashed-once"
    flowc = Flowc(tmp_path)
    os.environ["FLOWC_WORKER_TEST_CRASH_MEASURE"] = str(marker)
    try:
        flowc.run("daemon", "start")
    finally:
        del os.environ["FLOWC_WORKER_TEST_CRASH_MEASURE"]
    try:
        model = tuning_model(tmp_path / "m.onnx")
        result = flowc.submit(model, tmp_path / "m.fca", "--search-budget", "20")
        assert marker.exists()
        assert result["search"]["measured_kernels"] == result["search"]["tunable_kernels"]
        workers = json.loads(flowc.run("workers", "--json").stdout)
        assert workers["tasks_retried"] >= 1, workers
    finally:
        flowc.run("daemon", "stop", check=False)


@pytest.mark.parametrize("budget", ["abc", "-1", "0", "", "1e9"])
def test_a_bad_budget_is_refused(flowc, tmp_path, budget):
    model = tuning_model(tmp_path / "m.onnx")
    result = flowc.run("submit", model, "--search-budget", budget, check=False)
    assert result.returncode != 0
    assert "--search-budget" in result.stderr
    assert "not a number of seconds" in result.stderr


def moved_artifact(searched, out):
    """A copy of a searched artifact as if moved to a machine whose library
    lacks its plan's first convolution candidate: one letter of the
    candidate's implementation name is changed, the length kept (so it must
    be run unverified). Returns `out`."""
    data = searched.read_bytes()
    impl = data.index(b"impl=", data.index(b'"candidate"')) + len(b"impl=")
    renamed = b"X" if data[impl:impl + 1] != b"X" else b"Y"
    out.write_bytes(data[:impl] + renamed + data[impl + 1:])
    return out


def test_a_plan_candidate_that_cannot_run_warns_on_stderr_not_in_the_json(flowc, tmp_path):
    """An artifact moved to a machine whose library lacks its plan's
    convolution candidate runs the default after one warning: on stderr as
    `flowc: warning: ...`, so that `flowc run --json`'s stdout stays one JSON
    object (the runtime's warnings used to reach stdout). The candidate is
    made unknown by renaming its implementation in the plan, run unverified."""
    model = tuning_model(tmp_path / "m.onnx")
    artifact = tmp_path / "searched.fca"
    assert flowc.submit(model, artifact, "--search-budget", "30")["search"]["tuned_kernels"] > 0
    moved = moved_artifact(artifact, tmp_path / "moved.fca")
    x = tmp_path / "x.npy"
    np.save(x, inputs()["x"])
    ran = flowc.run("run", moved, "--input", f"x={x}", "--json", "--no-verify")
    answer = json.loads(ran.stdout)
    assert answer["outputs"][0]["name"] == "y"
    warnings = [line for line in ran.stderr.splitlines() if line.startswith("flowc: warning:")]
    assert len(warnings) == 1 and "cannot run here" in warnings[0], ran.stderr
    assert "warning" not in ran.stdout
