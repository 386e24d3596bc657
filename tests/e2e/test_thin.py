"""Thin artifacts (`flowc submit --thin`): weights referred to by digest and
mapped from the flowc cache when the artifact runs (docs/artifact.md)."""
import json
import re
import shutil
import subprocess

import numpy as np

from conftest import BIN
from test_first_hour import big_model, submit_json


def run_outputs(flowc, artifact, x, *global_options):
    """`flowc run` with the model's only input; returns (result, outputs)."""
    np.save(flowc.tmp / "x.npy", x)
    cmd = [str(BIN / "flowc"), *global_options, "run", str(artifact), "--input",
           str(flowc.tmp / "x.npy"), "--json", "--print", "100000"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        return result, None
    report = json.loads(result.stdout)
    return result, {o["name"]: np.array(o["values"], dtype=np.float32) for o in report["outputs"]}


def test_thin_artifact_is_small_and_computes_what_the_packed_one_does(flowc, tmp_path):
    model, x, expected = big_model(tmp_path / "big.onnx")
    # The packed artifact carries its 1 MiB weight; the thin one refers to it.
    packed = submit_json(flowc, model, tmp_path / "packed.fca")
    thin = submit_json(flowc, model, tmp_path / "thin.fca", "--thin")
    assert packed["thin"] is False and thin["thin"] is True
    assert thin["cache"] == "miss" and thin["code_cache"] == "hit"
    assert thin["artifact_digest"] != packed["artifact_digest"]
    packed_bytes = (tmp_path / "packed.fca").stat().st_size
    thin_bytes = (tmp_path / "thin.fca").stat().st_size
    assert packed_bytes > 1 << 20
    assert thin_bytes < 64 << 10, thin_bytes
    # A second --thin submit is a hit on the thin artifact, not the packed.
    again = submit_json(flowc, model, tmp_path / "thin.fca", "--thin")
    assert again["cache"] == "hit" and again["artifact_digest"] == thin["artifact_digest"]
    # Both compute the same outputs.
    _, from_packed = run_outputs(flowc, tmp_path / "packed.fca", x, "--cache-dir",
                                 str(flowc.cache_dir))
    _, from_thin = run_outputs(flowc, tmp_path / "thin.fca", x, "--cache-dir",
                               str(flowc.cache_dir))
    np.testing.assert_array_equal(from_thin["y"], from_packed["y"])
    np.testing.assert_allclose(from_thin["y"], expected.ravel(), rtol=1e-4, atol=1e-4)
    # inspect says what it is.
    described = json.loads(flowc.run("inspect", tmp_path / "thin.fca", "--json").stdout)
    assert described["thin"] is True
    assert described["external_weight_bytes"] >= 512 * 512 * 4
    assert "code_error" not in described


def test_thin_artifact_finds_the_cache_that_linked_it(flowc, tmp_path):
    model, x, expected = big_model(tmp_path / "big.onnx")
    submit_json(flowc, model, tmp_path / "thin.fca", "--thin")
    # Another --cache-dir (empty): the artifact's recorded cache still has them.
    other = tmp_path / "other-cache"
    other.mkdir()
    result, outputs = run_outputs(flowc, tmp_path / "thin.fca", x, "--cache-dir", str(other))
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(outputs["y"], expected.ravel(), rtol=1e-4, atol=1e-4)


def test_thin_artifact_without_its_weights_is_a_clear_error(flowc, tmp_path):
    model, x, _ = big_model(tmp_path / "big.onnx")
    submit_json(flowc, model, tmp_path / "thin.fca", "--thin")
    # Move the artifact and empty its cache: nowhere to map the weight from.
    shutil.copy(tmp_path / "thin.fca", tmp_path / "moved.fca")
    flowc.run("cache", "clear")
    result, _ = run_outputs(flowc, tmp_path / "moved.fca", x, "--cache-dir",
                            str(flowc.cache_dir))
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowc: error: "), result.stderr
    assert "moved.fca" in lines[0] and "sha256:" in lines[0]
    assert "without --thin" in lines[0]
    # The next --thin submit links it again (its cache entry depended on the
    # weight, which clear removed).
    again = submit_json(flowc, model, tmp_path / "thin2.fca", "--thin")
    assert again["cache"] == "miss"


def test_a_hostile_digest_in_a_thin_plan_names_no_path(flowc, tmp_path):
    model, x, _ = big_model(tmp_path / "big.onnx")
    submit_json(flowc, model, tmp_path / "thin.fca", "--thin")
    data = bytearray((tmp_path / "thin.fca").read_bytes())
    # Rewrite the weight's digest (same length) to climb out of the cache.
    start = data.index(b'"digest": "sha256:') + len(b'"digest": "')
    hostile = b"sha256:../../../../../../etc/passwd"
    end = data.index(b'"', start)
    data[start:end] = hostile + b"x" * (end - start - len(hostile))
    (tmp_path / "hostile.fca").write_bytes(bytes(data))
    result, _ = run_outputs(flowc, tmp_path / "hostile.fca", x, "--cache-dir",
                            str(flowc.cache_dir))
    # The plan's digest finds the edit; without digests, the plan's bounds
    # refuse the malformed weight digest before any file is looked up.
    assert result.returncode == 3, result.stderr
    assert "plan section is damaged: sha256 " in result.stderr
    result = flowc.run("run", tmp_path / "hostile.fca",
                       "--input", flowc.tmp / "x.npy", "--no-verify", check=False)
    assert result.returncode == 3, result.stderr
    # The first digest of the plan is a weight's, or where the library
    # kernels pack their weights at link (AVX-512 machines), a packed one's.
    assert re.search(r"plan section: (weight |packed weight of kernel site )\S+ has digest",
                     result.stderr), result.stderr
    assert "not sha256:<hex>/" in result.stderr
