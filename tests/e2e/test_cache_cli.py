"""`flowc cache stats|ls|gc|verify|pin|unpin|clear`, each with --json."""
import json
import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper

import make_models
from conftest import BIN, Flowc, save


def cache(flowc, *args, check=True):
    result = flowc.run("cache", *args, "--json", check=check)
    return json.loads(result.stdout) if result.stdout else None, result


@pytest.fixture
def compiled(flowc, tmp_path):
    paths = [save(make_models.make_cnn(np.random.default_rng(s)), tmp_path / f"m{s}.onnx")
             for s in range(3)]
    results = [flowc.submit(p) for p in paths]
    return flowc, paths, results


def test_stats_reports_sizes_hits_misses_and_dedup(compiled):
    flowc, paths, _ = compiled
    flowc.submit(paths[0])  # a hit
    stats, _ = cache(flowc, "stats")
    assert stats["blobs"] > 0 and stats["bytes"] > 0
    assert stats["hits"] >= 1 and stats["misses"] >= 3
    for key in ("evictions", "dedup_bytes", "inline_blobs", "max_bytes", "actions"):
        assert key in stats


def test_ls_lists_blobs(compiled):
    flowc, _, results = compiled
    blobs, _ = cache(flowc, "ls", "--limit", "1000")
    digests = {b["digest"] for b in blobs}
    assert {r["artifact_digest"] for r in results} <= digests


def test_gc_evicts_unpinned_blobs_but_keeps_pinned_ones(compiled):
    flowc, paths, results = compiled
    keep = results[0]["artifact_digest"]
    cache(flowc, "pin", keep)
    report, _ = cache(flowc, "gc", "--max-size", "0")
    assert report["evicted_blobs"] > 0
    blobs, _ = cache(flowc, "ls")
    assert [b["digest"] for b in blobs] == [keep]
    assert blobs[0]["pinned"]
    # Evicted entries are gone: the next submit compiles again.
    assert flowc.submit(paths[1])["cache"] == "miss"
    cache(flowc, "unpin", keep)
    entry = [b for b in cache(flowc, "ls")[0] if b["digest"] == keep]
    assert entry and not entry[0]["pinned"]


def test_clear_empties_the_cache(compiled):
    flowc, paths, _ = compiled
    report, _ = cache(flowc, "clear")
    assert report["evicted_blobs"] > 0 and report["dropped_actions"] > 0
    stats, _ = cache(flowc, "stats")
    assert stats["blobs"] == 0 and stats["actions"] == 0
    assert flowc.submit(paths[0])["cache"] == "miss"


def wide_matmul_model():
    """One MatMul whose 128 KiB weight is stored as a blob file, not inline."""
    rng = np.random.default_rng(7)
    weight = make_models.tensor(rng, "w", (256, 128), 0.1)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", make_models.OPSET)],
                             ir_version=make_models.IR_VERSION)


def test_verify_detects_and_repairs_a_corrupt_blob(compiled, tmp_path):
    flowc, paths, results = compiled
    paths.append(save(wide_matmul_model(), tmp_path / "wide.onnx"))
    flowc.submit(paths[-1])
    report, _ = cache(flowc, "verify")
    assert report["ok"] and report["checked"] > 0
    # Corrupt one large blob file behind the cache.
    files = sorted(p for p in (flowc.cache_dir / "cas").rglob("*") if p.is_file())
    victim = files[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    report, result = cache(flowc, "verify", check=False)
    assert result.returncode == 1
    assert not report["ok"] and len(report["corrupt"]) == 1
    report, result = cache(flowc, "verify", "--repair")
    assert result.returncode == 0 and report["quarantined"] == 1
    report, _ = cache(flowc, "verify")
    assert report["ok"]
    # Whatever depended on the bad blob compiles again, correctly.
    for path in paths:
        assert flowc.submit(path)["artifact_digest"]


def test_pin_of_an_unknown_digest_is_an_error(flowc):
    _, result = cache(flowc, "pin", "sha256:" + "0" * 64 + "/1", check=False)
    assert result.returncode != 0 and "not in the cache" in result.stderr
    _, result = cache(flowc, "pin", "not-a-digest", check=False)
    assert result.returncode != 0 and "malformed digest" in result.stderr


def test_gc_rejects_a_bad_size(flowc):
    _, result = cache(flowc, "gc", "--max-size", "lots", check=False)
    assert result.returncode != 0 and "invalid size 'lots'" in result.stderr


def test_unchanged_file_is_answered_from_the_stat_memo(flowc, tmp_path):
    path = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "m.onnx")
    # Old enough that the racy-stat rule allows memoizing it.
    os.utime(path, (1_600_000_000, 1_600_000_000))
    import time
    time.sleep(2.1)  # ctime cannot be set back
    flowc.submit(path)
    flowc.submit(path)
    stats, _ = cache(flowc, "stats")
    assert stats["stat_memo_entries"] == 1
    # Corrupting the file without changing its identity is not detectable by
    # design; changing it is: the memo entry no longer matches.
    path.write_bytes(path.read_bytes())
    assert flowc.submit(path)["cache"] == "hit"  # same content, re-ingested
