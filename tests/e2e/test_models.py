"""Models built with onnx.helper, compiled through the daemon, run with
`flowc run` and compared with onnxruntime."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import make_models
from conftest import assert_close, onnxruntime_outputs, save


def check_against_onnxruntime(flowc, model_path, inputs):
    result = flowc.submit(model_path)
    assert result["cache"] == "miss"
    ours = flowc.execute(model_path.with_suffix(".fca"), inputs)
    reference = onnxruntime_outputs(model_path, inputs)
    assert ours.keys() == reference.keys()
    for name in reference:
        assert_close(ours[name], reference[name])
    return result


@pytest.mark.parametrize("batch", [1, 3])
def test_small_cnn_matches_onnxruntime(flowc, tmp_path, batch):
    rng = np.random.default_rng(batch)
    path = save(make_models.make_cnn(rng, batch=batch), tmp_path / "cnn.onnx")
    x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    result = check_against_onnxruntime(flowc, path, {"image": x})
    assert result["op_counts"]["Conv"] == 2


@pytest.mark.parametrize("batch", [1, 4])
def test_mlp_matches_onnxruntime(flowc, tmp_path, batch):
    rng = np.random.default_rng(10 + batch)
    path = save(make_models.make_mlp(rng, batch=batch), tmp_path / "mlp.onnx")
    x = rng.standard_normal((batch, 4, 16)).astype(np.float32)
    check_against_onnxruntime(flowc, path, {"x": x})


def test_output_depends_on_input(flowc, tmp_path):
    """A compiler that ignored its input could not pass the comparisons."""
    rng = np.random.default_rng(7)
    path = save(make_models.make_cnn(rng), tmp_path / "cnn.onnx")
    flowc.submit(path)
    a = flowc.execute(path.with_suffix(".fca"), {"image": rng.standard_normal((1, 3, 32, 32))})
    b = flowc.execute(path.with_suffix(".fca"), {"image": rng.standard_normal((1, 3, 32, 32))})
    assert not np.allclose(a["probs"], b["probs"])


def test_second_submit_is_a_cache_hit(flowc, tmp_path):
    path = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "cnn.onnx")
    first = flowc.submit(path, tmp_path / "first.fca")
    second = flowc.submit(path, tmp_path / "second.fca")
    assert (first["cache"], second["cache"]) == ("miss", "hit")
    assert first["artifact_digest"] == second["artifact_digest"]
    assert (tmp_path / "first.fca").read_bytes() == (tmp_path / "second.fca").read_bytes()


def test_weights_only_change_relinks_without_recompiling(flowc, tmp_path):
    v1 = save(make_models.make_cnn(np.random.default_rng(1)), tmp_path / "v1.onnx")
    v2 = save(make_models.make_cnn(np.random.default_rng(2)), tmp_path / "v2.onnx")
    flowc.submit(v1)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    result = check_against_onnxruntime(flowc, v2, {"image": x})
    assert result["code_cache"] == "hit"


def test_large_artifact_streams_in_chunks(flowc, tmp_path):
    """A 4 MiB weight makes the artifact span several 1 MiB chunks."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((1024, 1024)).astype(np.float32) * 0.05, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1024])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = save(model, tmp_path / "big.onnx")
    x = rng.standard_normal((2, 1024)).astype(np.float32)
    check_against_onnxruntime(flowc, path, {"x": x})
    assert (tmp_path / "big.fca").stat().st_size > 4 * 1024 * 1024


def test_inspect_reports_model_and_artifact(flowc, tmp_path):
    import json
    path = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "cnn.onnx")
    model = json.loads(flowc.run("inspect", path, "--json").stdout)
    assert model["parameters"] == 8 * 3 * 9 + 8 + 16 * 8 * 9 + 16 + 10 * 16 + 10
    assert model["inputs"][0] == {"name": "image", "dtype": "float32", "shape": [1, 3, 32, 32]}
    result = flowc.submit(path)
    artifact = json.loads(flowc.run("inspect", path.with_suffix(".fca"), "--json").stdout)
    assert artifact["model_digest"] == result["model_digest"] == model["model_digest"]


def test_concurrent_submits_all_succeed(flowc, tmp_path):
    """Several clients at once: the embedded workers compile in parallel and
    every client gets its own correct artifact."""
    from concurrent.futures import ThreadPoolExecutor
    paths = [save(make_models.make_cnn(np.random.default_rng(seed)), tmp_path / f"m{seed}.onnx")
             for seed in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(flowc.submit, paths))
    assert len({r["artifact_digest"] for r in results}) == 4
    x = np.random.default_rng(9).standard_normal((1, 3, 32, 32)).astype(np.float32)
    for path in paths:
        ours = flowc.execute(path.with_suffix(".fca"), {"image": x})
        assert_close(ours["probs"], onnxruntime_outputs(path, {"image": x})["probs"])


def test_external_data_model_matches_onnxruntime(flowc, tmp_path):
    """Weights saved with onnx's external-data format, all in one file."""
    path = tmp_path / "ext" / "cnn.onnx"
    path.parent.mkdir()
    model = make_models.make_cnn(np.random.default_rng(21))
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="cnn.weights", size_threshold=0)
    assert (path.parent / "cnn.weights").stat().st_size > 6000
    x = np.random.default_rng(22).standard_normal((1, 3, 32, 32)).astype(np.float32)
    check_against_onnxruntime(flowc, path, {"image": x})
    # Same weights inline or external: the same model.
    inline = save(make_models.make_cnn(np.random.default_rng(21)), tmp_path / "inline.onnx")
    assert flowc.submit(inline)["model_digest"] == flowc.submit(path)["model_digest"]


def test_run_bench_reports_median_and_p90(flowc, tmp_path):
    import json
    path = save(make_models.make_mlp(np.random.default_rng(3)), tmp_path / "mlp.onnx")
    flowc.submit(path)
    np.save(tmp_path / "x.npy", np.zeros((4, 4, 16), np.float32))
    report = json.loads(flowc.run("run", path.with_suffix(".fca"), "--input",
                                  f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "o",
                                  "--bench", "5", "--json").stdout)
    assert report["iterations"] == 5
    assert 0 < report["median_ms"] <= report["p90_ms"]
    result = flowc.run("run", path.with_suffix(".fca"), "--input", f"x={tmp_path / 'x.npy'}",
                       "--bench", "0", check=False)
    assert result.returncode != 0 and "--bench" in result.stderr
