"""Remote submit: `flowc submit --upload` hashes the model's files here,
uploads only the blobs the daemon lacks and submits a manifest of digests;
the daemon never opens a path of the client's. (The protocol's hostile
cases, with a gRPC client of their own, are in
tests/integration/RemoteSubmitTest.cpp.)"""
import hashlib
import json
import os
import pathlib
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import Flowc, tmpfs_mount

WEIGHT_SHAPE = (512, 1024)  # 2 MiB of fp32 each: several 1 MiB chunks


def weights():
    rng = np.random.default_rng(7)
    return [numpy_helper.from_array(rng.standard_normal(WEIGHT_SHAPE).astype(np.float32), name)
            for name in ("w0", "w1")]


def external_model(directory: pathlib.Path, activation="Relu") -> pathlib.Path:
    """x @ w0 -> activation -> @ w1^T-shaped w1, with both weights in
    weights.bin beside the model. The activation changes the graph only:
    the weights file is the same bytes whatever it is."""
    directory.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"),
         helper.make_node(activation, ["h"], ["a"], name="act"),
         helper.make_node("Transpose", ["w1"], ["w1t"], name="t", perm=[1, 0]),
         helper.make_node("MatMul", ["a", "w1t"], ["y"], name="mm1")],
        "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 512])], weights())
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = directory / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    return path


def settle(*directories):
    """Waits until every file under `directories` is older than the memo's
    racy window (2 s): a file changed more recently is hashed every time,
    as a writer may still be at work on it."""
    newest = max(max(p.stat().st_mtime, p.stat().st_ctime)
                 for d in directories for p in d.iterdir())
    time.sleep(max(0.0, newest + 2.1 - time.time()))


def upload(flowc, model, out, *flags):
    return flowc.submit(model, out, "--upload", *flags)


def test_an_upload_submit_compiles_what_the_path_submit_compiles(flowc, tmp_path):
    model = external_model(tmp_path / "m")
    weights_bytes = (tmp_path / "m" / "weights.bin").stat().st_size
    # Cold: the daemon has neither file; both are uploaded, whole.
    first = upload(flowc, model, tmp_path / "up.fca")
    assert first["cache"] == "miss", first
    assert first["model_blobs"] == 2 and first["uploaded_blobs"] == 2, first
    assert first["uploaded_bytes"] == model.stat().st_size + weights_bytes, first
    assert first["hashed_bytes"] == first["model_bytes"] == first["uploaded_bytes"]
    # The path submit of the same model is the same artifact, answered by
    # the cache.
    by_path = flowc.submit(model, tmp_path / "path.fca")
    assert by_path["cache"] == "hit", by_path
    assert by_path["artifact_digest"] == first["artifact_digest"]
    assert (tmp_path / "up.fca").read_bytes() == (tmp_path / "path.fca").read_bytes()
    # The materialized model's directory is gone once the submit ended.
    assert not list((flowc.cache_dir / "tmp").glob("model.*"))


def test_a_changed_graph_uploads_only_the_onnx_and_an_unchanged_model_nothing(
        flowc, tmp_path):
    first = upload(flowc, external_model(tmp_path / "a"), tmp_path / "a.fca")
    weights_bytes = (tmp_path / "a" / "weights.bin").stat().st_size
    assert first["uploaded_bytes"] > weights_bytes
    # Same weights (another copy of the file), another graph: only the
    # .onnx travels, a few hundred bytes against the 4 MiB of weights.
    changed = external_model(tmp_path / "b", activation="Tanh")
    assert (tmp_path / "b" / "weights.bin").read_bytes() == \
        (tmp_path / "a" / "weights.bin").read_bytes()
    settle(tmp_path / "b")
    second = upload(flowc, changed, tmp_path / "b.fca")
    assert second["cache"] == "miss" and second["uploaded_blobs"] == 1, second
    assert second["uploaded_bytes"] == changed.stat().st_size, second
    assert second["uploaded_bytes"] * 1000 < weights_bytes
    assert second["artifact_digest"] != first["artifact_digest"]
    # Unchanged: nothing uploaded, nothing hashed (the client's memo knows
    # the files), and the daemon's cache answers.
    again = upload(flowc, changed, tmp_path / "b2.fca")
    assert again["uploaded_bytes"] == 0 and again["uploaded_blobs"] == 0, again
    assert again["hashed_bytes"] == 0, again
    assert again["cache"] == "hit" and again["artifact_digest"] == second["artifact_digest"]


def test_a_rewritten_weights_file_is_hashed_again_and_uploaded(flowc, tmp_path):
    model = external_model(tmp_path / "m")
    upload(flowc, model, tmp_path / "one.fca")
    data = tmp_path / "m" / "weights.bin"
    blob = bytearray(data.read_bytes())
    blob[100] ^= 0x40  # one weight changes, the size does not
    data.write_bytes(bytes(blob))
    result = upload(flowc, model, tmp_path / "two.fca")
    assert result["hashed_bytes"] == len(blob) + model.stat().st_size, result
    assert result["uploaded_blobs"] == 1 and result["uploaded_bytes"] == len(blob), result


def test_the_human_output_says_what_was_uploaded(flowc, tmp_path):
    model = external_model(tmp_path / "m")
    out = flowc.run("submit", model, "-o", tmp_path / "m.fca", "--upload").stdout
    assert "flowc: uploaded 2 of 2 blobs (4.19 MB of 4.19 MB)" in out, out
    out = flowc.run("submit", model, "-o", tmp_path / "m.fca", "--upload").stdout
    assert "flowc: uploaded 0 of 2 blobs (0 B of 4.19 MB)" in out, out


def model_with_location(path: pathlib.Path, location: str) -> pathlib.Path:
    """A model whose one initializer says its data lies at `location`."""
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], "loc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def test_bad_external_data_locations_are_refused_before_anything_is_sent(flowc, tmp_path):
    (tmp_path / "outside.bin").write_bytes(bytes(16))
    (tmp_path / "m").mkdir()
    os.symlink(tmp_path / "outside.bin", tmp_path / "m" / "link.bin")
    cases = [("../outside.bin", "escapes the model's directory"),
             ("sub/../../outside.bin", "escapes the model's directory"),
             (str(tmp_path / "outside.bin"), "is absolute"),
             ("", "is empty"),
             (".", "names a directory"),
             ("missing.bin", "external data file 'missing.bin' not found"),
             ("link.bin", "link.bin")]
    for i, (location, message) in enumerate(cases):
        model = model_with_location(tmp_path / "m" / f"bad{i}.onnx", location)
        result = flowc.run("submit", model, "-o", tmp_path / "bad.fca", "--upload",
                           check=False)
        assert result.returncode == 3, (location, result.stderr)
        assert f"bad{i}.onnx" in result.stderr and message in result.stderr, \
            (location, result.stderr)
    # Nothing reached the daemon's cache.
    stats = flowc.run("cache", "stats", "--json").stdout
    assert '"blobs":0' in stats.replace(" ", ""), stats


def test_a_file_that_is_not_onnx_is_refused_with_the_byte_at_fault(flowc, tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x0a\xff\xff\xff\xff\x0f" + bytes(8))
    result = flowc.run("submit", garbage, "-o", tmp_path / "g.fca", "--upload", check=False)
    assert result.returncode == 3, result.stderr
    assert "garbage.onnx" in result.stderr and "not a valid ONNX protobuf at byte 0" in \
        result.stderr, result.stderr
    # An empty file is no model: uploaded, and the daemon's ingest says what
    # is wrong as for a path submit, naming the file as the manifest does
    # (not the daemon's directory it was materialized in).
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    result = flowc.run("submit", empty, "-o", tmp_path / "e.fca", "--upload", check=False)
    assert result.returncode == 3, result.stderr
    assert "flowc: error: empty.onnx: empty file (not an ONNX model)" in result.stderr, \
        result.stderr
    assert "/tmp/model." not in result.stderr, result.stderr


def test_a_reproducer_directory_is_refused_for_upload(flowc, tmp_path):
    (tmp_path / "repro").mkdir()
    result = flowc.run("submit", tmp_path / "repro", "-o", tmp_path / "r.fca", "--upload",
                       check=False)
    assert result.returncode == 3, result.stderr
    assert "is a reproducer directory" in result.stderr, result.stderr


def test_uploaded_blobs_are_the_files_digests(flowc, tmp_path):
    model = external_model(tmp_path / "m")
    upload(flowc, model, tmp_path / "m.fca")
    listed = flowc.run("cache", "ls", "--json", check=False)
    for path in (model, tmp_path / "m" / "weights.bin"):
        data = path.read_bytes()
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}/{len(data)}"
        assert digest in listed.stdout, (path, listed.stdout[:2000])


def test_a_full_disk_refuses_the_upload_and_stores_nothing_of_it(tmp_path):
    with tmpfs_mount(tmp_path / "disk", "3m") as disk:
        flowc = Flowc(tmp_path)
        flowc.cache_dir = disk / "cache"
        flowc.run("daemon", "start")
        try:
            # 4 MiB of weights cannot fit on a 3 MiB disk.
            model = external_model(tmp_path / "m")
            result = flowc.run("submit", model, "-o", tmp_path / "m.fca", "--upload",
                               check=False)
            assert result.returncode == 5, result.stderr
            assert "weights.bin" in result.stderr and "disk full" in result.stderr, \
                result.stderr
            data = (tmp_path / "m" / "weights.bin").read_bytes()
            digest = f"sha256:{hashlib.sha256(data).hexdigest()}/{len(data)}"
            assert digest not in flowc.run("cache", "ls", "--json").stdout
            assert list((flowc.cache_dir / "uploads").iterdir()) == []
            assert list((flowc.cache_dir / "tmp").iterdir()) == []
            report = json.loads(flowc.run("cache", "verify", "--json").stdout)
            assert report["ok"], report
        finally:
            flowc.run("daemon", "stop", check=False)
