"""A full disk gives a clean error, leaves nothing half-written, and the
cache stays consistent. Uses a small tmpfs (needs root; skipped otherwise)."""
import json
import subprocess

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import make_models
from conftest import tmpfs_mount, Flowc, save


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs_mount(tmp_path / "disk", "3m") as mount:
        yield mount


def big_model(path, mib):
    n = int((mib * 1024 * 1024 / 4) ** 0.5)
    rng = np.random.default_rng(mib)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, n])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "w")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)],
                                   ir_version=8)
    return save(model, path)


def test_disk_full_fails_cleanly_and_keeps_the_cache_consistent(tmp_path, small_disk):
    flowc = Flowc(tmp_path)
    flowc.cache_dir = small_disk / "cache"
    flowc.run("daemon", "start")
    try:
        small = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "small.onnx")
        assert flowc.submit(small)["cache"] == "miss"
        before = json.loads(flowc.run("cache", "stats", "--json").stdout)
        # 4 MiB of weights cannot fit on a 3 MiB disk.
        result = flowc.run("submit", big_model(tmp_path / "big.onnx", 4), "-o",
                           tmp_path / "big.fca", check=False)
        assert result.returncode != 0
        assert result.stderr.startswith("flowc: error: ")
        assert "disk full" in result.stderr or "No space left" in result.stderr, result.stderr
        assert not (tmp_path / "big.fca").exists()
        assert list((flowc.cache_dir / "tmp").iterdir()) == []
        report = json.loads(flowc.run("cache", "verify", "--json").stdout)
        assert report["ok"], report
        after = json.loads(flowc.run("cache", "stats", "--json").stdout)
        assert after["blobs"] == before["blobs"] and after["actions"] == before["actions"]
        # What was cached still answers.
        assert flowc.submit(small)["cache"] == "hit"
    finally:
        flowc.run("daemon", "stop", check=False)
