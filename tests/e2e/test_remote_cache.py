"""The remote cache tier against real servers on loopback: nginx from
Debian as a Bazel HTTP cache (WebDAV), and BuildGrid 0.9.1 serving CAS,
ActionCache and ByteStream (tests/remotecache/servers.py starts both).
Two daemons with separate local caches share what either compiled; a
tampered blob, a read-only daemon, a dead server, signatures and --explain
are each checked against what the server saw."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import BIN, ROOT, Flowc, save
from test_tasks import daemon, elementwise_chain  # noqa: F401 (a fixture)

sys.path.insert(0, str(ROOT / "tests" / "remotecache"))
import servers  # noqa: E402

SERVERS = ["nginx", "buildgrid"]


@pytest.fixture(params=SERVERS)
def remote(request, tmp_path):
    server = servers.start(request.param, tmp_path / request.param)
    yield server
    server.stop()


def remote_flags(server, *more):
    flags = ["--remote-cache", server.url, *more]
    if server.instance:
        flags += ["--remote-instance", server.instance]
    return flags


def status(d):
    return json.loads(d.flowc.run("status", "--json").stdout)["remote_cache"]


def conv_model(path: pathlib.Path, scale=1.0) -> pathlib.Path:
    """A convolution (a library kernel with a packed weight: a derived
    entry) then elementwise ops (generated kernels)."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((8, 3, 3, 3)) * scale).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Sigmoid", ["r"], ["y"], name="sig")],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_second_daemon_gets_a_remote_hit_with_no_kernel_compiled(daemon, remote, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx")
    first = daemon(*remote_flags(remote), name="first")
    compiled = first.flowc.submit(model, tmp_path / "a.fca")
    assert compiled["cache"] == "miss" and compiled["kernels_compiled"] > 4
    uploaded = status(first)
    assert uploaded["uploads"] >= 1 and uploaded["bytes_uploaded"] > 0, uploaded
    assert uploaded["errors"] == 0 and uploaded["mode"] == "read-write", uploaded

    # Another machine: its own cache, the model under another path and cwd.
    elsewhere = tmp_path / "elsewhere" / "deeper"
    elsewhere.mkdir(parents=True)
    copy = shutil.copy(model, elsewhere / "chain.onnx")
    second = daemon(*remote_flags(remote), name="second")
    hit = second.flowc.submit(pathlib.Path(copy), tmp_path / "b.fca")
    assert hit["cache"] == "hit" and hit["answered_by"] == "remote", hit
    assert hit["kernels_compiled"] == 0
    assert hit["artifact_digest"] == compiled["artifact_digest"]
    assert (tmp_path / "b.fca").read_bytes() == (tmp_path / "a.fca").read_bytes()
    counters = status(second)
    assert counters["hits"] >= 1 and counters["bytes_downloaded"] > 0, counters

    # The remote hit is local now: the next one asks the remote nothing.
    again = second.flowc.submit(pathlib.Path(copy), tmp_path / "c.fca")
    assert again["cache"] == "hit" and again["answered_by"] == "local", again
    assert status(second)["hits"] == counters["hits"]


def conv_stack(path: pathlib.Path, seed: int) -> pathlib.Path:
    """Four convolutions of four shapes: four tunable kernels of their own
    signatures. The seed sets the weights alone."""
    rng = np.random.default_rng(seed)
    channels = [3, 8, 12, 16, 20]
    nodes, weights = [], []
    for i in range(4):
        weights.append(numpy_helper.from_array(
            (rng.standard_normal((channels[i + 1], channels[i], 3, 3)) * 0.2).astype(np.float32),
            f"w{i}"))
        nodes.append(helper.make_node("Conv", ["x" if i == 0 else f"c{i - 1}", f"w{i}"],
                                      ["y" if i == 3 else f"c{i}"], name=f"conv{i}",
                                      pads=[1, 1, 1, 1]))
    graph = helper.make_graph(
        nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, 24, 24])], weights)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_search_records_reach_another_machines_compile(daemon, remote, tmp_path):
    """A search's records go to the tier; another machine's compile of the
    same kernels (other weights: an artifact miss) takes them from there,
    looked up several at a time, and measures nothing."""
    a = daemon(*remote_flags(remote), name="searcher")
    searched = a.flowc.submit(conv_stack(tmp_path / "a.onnx", 1), tmp_path / "a.fca",
                              "--search-budget", "20")["search"]
    assert searched["measured_kernels"] >= 3, searched
    b = daemon(*remote_flags(remote), name="reader")
    result = b.flowc.submit(conv_stack(tmp_path / "b.onnx", 2), tmp_path / "b.fca")
    assert result["cache"] == "miss", result
    assert result["search"]["measured_kernels"] == 0, result["search"]
    assert result["search"]["tuned_kernels"] == searched["measured_kernels"], result["search"]
    mine = {r["signature"] for r in json.loads(a.flowc.run("tuning", "ls", "--json").stdout)}
    theirs = {r["signature"] for r in json.loads(b.flowc.run("tuning", "ls", "--json").stdout)}
    assert theirs == mine and len(mine) >= 3, (mine, theirs)


def test_another_machines_link_takes_the_packed_weights_from_the_tier(daemon, remote,
                                                                      tmp_path):
    """The convolutions' weights packed at one machine's link reach another
    machine's link of other options (an artifact miss), looked up several
    at a time: none is packed again."""
    model = conv_stack(tmp_path / "m.onnx", 1)

    def pack_line(d, out, *options):
        result = d.flowc.run("submit", model, "-o", out, "--progress", *options)
        [line] = [line for line in result.stderr.splitlines() if "pack:" in line]
        return line

    a = daemon(*remote_flags(remote), name="packer")
    assert "(4 packed, 0 cached)" in pack_line(a, tmp_path / "a.fca", "-O", "2")
    b = daemon(*remote_flags(remote), name="linker")
    assert "(0 packed, 4 cached)" in pack_line(b, tmp_path / "b.fca", "-O", "3")
    assert status(b)["hits"] >= 8, status(b)  # each weight's layout and bytes


def test_a_tampered_blob_is_refused_and_the_model_compiles(daemon, remote, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=4)
    first = daemon(*remote_flags(remote), name="first")
    compiled = first.flowc.submit(model, tmp_path / "a.fca")
    remote.tamper(compiled["artifact_digest"])

    second = daemon(*remote_flags(remote), name="second")
    result = second.flowc.submit(model, tmp_path / "b.fca")
    assert result["answered_by"] != "remote", result
    assert result["artifact_digest"] == compiled["artifact_digest"]
    assert (tmp_path / "b.fca").read_bytes() == (tmp_path / "a.fca").read_bytes()
    counters = status(second)
    assert counters["data_loss"] >= 1, counters
    log = second.log.read_text()
    assert "a corrupt or tampered blob; not used" in log, log[-2000:]
    verify = json.loads(second.flowc.run("cache", "verify", "--json").stdout)
    assert verify["corrupt"] == [], verify


def test_read_only_mode_never_writes(daemon, remote, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=3)
    before = remote.writes()
    reader = daemon(*remote_flags(remote, "--remote-read-only"), name="reader")
    result = reader.flowc.submit(model, tmp_path / "a.fca")
    assert result["cache"] == "miss"
    counters = status(reader)
    assert counters["mode"] == "read-only" and counters["uploads"] == 0, counters
    assert counters["misses"] >= 1, counters
    assert remote.writes() == before


def test_a_dead_server_never_fails_a_compile(daemon, remote, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=3)
    d = daemon(*remote_flags(remote, "--remote-timeout", "2s"), name="d")
    remote.kill()
    result = d.flowc.submit(model, tmp_path / "a.fca")
    assert result["cache"] == "miss"
    counters = status(d)
    assert counters["errors"] >= 1 and "local only" in counters["state"], counters
    # Backing off: the next job does not ask the dead server at all.
    other = elementwise_chain(tmp_path / "other.onnx", blocks=2, last="Tanh")
    d.flowc.submit(other, tmp_path / "b.fca")
    assert status(d)["errors"] == counters["errors"]
    assert d.log.read_text().count("compiles go on with the local cache") == 1
    verify = json.loads(d.flowc.run("cache", "verify", "--json").stdout)
    assert verify["corrupt"] == [] and verify["missing_files"] == 0, verify


@pytest.fixture
def keys(tmp_path):
    made = {}
    for name in ("farm", "rogue"):
        private = tmp_path / f"{name}.pem"
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", private],
                       check=True, capture_output=True)
        public = tmp_path / f"{name}.pub"
        subprocess.run(["openssl", "pkey", "-in", private, "-pubout", "-out", public],
                       check=True, capture_output=True)
        made[name] = (private, public)
    return made


@pytest.mark.parametrize("remote", ["nginx"], indirect=True)
def test_readers_refuse_entries_not_signed_by_a_trusted_key(daemon, remote, keys, tmp_path):
    farm, rogue = keys["farm"], keys["rogue"]
    signed = elementwise_chain(tmp_path / "signed.onnx", blocks=3)
    writer = daemon(*remote_flags(remote, "--sign-key", farm[0]), name="writer")
    compiled = writer.flowc.submit(signed, tmp_path / "a.fca")
    trusting = daemon(*remote_flags(remote, "--trust-key", farm[1]), name="trusting")
    hit = trusting.flowc.submit(signed, tmp_path / "b.fca")
    assert hit["answered_by"] == "remote", hit
    assert hit["artifact_digest"] == compiled["artifact_digest"]

    # A compromised job writes with its own key, or with none at all.
    forged = elementwise_chain(tmp_path / "forged.onnx", blocks=3, last="Tanh")
    daemon(*remote_flags(remote, "--sign-key", rogue[0]), name="rogue").flowc.submit(
        forged, tmp_path / "c.fca")
    unsigned = elementwise_chain(tmp_path / "unsigned.onnx", blocks=3, last="Abs")
    daemon(*remote_flags(remote), name="plain").flowc.submit(unsigned, tmp_path / "d.fca")
    strict = daemon(*remote_flags(remote, "--trust-key", farm[1]), name="strict")
    for model in (forged, unsigned):
        result = strict.flowc.submit(model, tmp_path / (model.stem + ".fca"))
        assert result["answered_by"] != "remote" and result["kernels_compiled"] > 0, result
    assert status(strict)["bad_signatures"] >= 2
    assert "not signed by a trusted key" in strict.log.read_text()


def test_a_bad_signing_key_is_refused_at_start(tmp_path):
    key = tmp_path / "rsa.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "rsa", "-out", key], check=True,
                   capture_output=True)
    for flags, message in (
            (["--remote-cache", "http://127.0.0.1:9/c", "--sign-key", key], "not an Ed25519 key"),
            (["--remote-cache", "http://127.0.0.1:9/c", "--trust-key", tmp_path / "none"],
             "cannot be read"),
            (["--remote-cache", "ftp://x/y"], "--remote-cache"),
            (["--remote-header", "a=b"], "need --remote-cache"),
            (["--remote-cache", "http://127.0.0.1:9/c", "--remote-upload-weights", "some"],
             "missing or never")):
        result = subprocess.run(
            [str(BIN / "flowcd"), "--cache-dir", tmp_path / "c", *map(str, flags)],
            capture_output=True, text=True, timeout=30)
        assert result.returncode == 2, (flags, result.stderr)
        assert message in result.stderr, (flags, result.stderr)


@pytest.mark.parametrize("remote", ["buildgrid"], indirect=True)
def test_explain_names_the_factor_that_missed_across_machines(daemon, remote, tmp_path):
    (tmp_path / "m").mkdir()
    model = conv_model(tmp_path / "m" / "net.onnx")
    first = daemon(*remote_flags(remote), name="first")
    first.flowc.submit(model, tmp_path / "a.fca")

    second = daemon(*remote_flags(remote), name="second")
    hit = second.flowc.submit(model, tmp_path / "b.fca", "--explain")
    assert hit["explain"].startswith("hit: answered by the remote cache"), hit["explain"]

    # New weights, same graph: the miss names the tensor.
    (tmp_path / "w").mkdir()
    tuned = conv_model(tmp_path / "w" / "net.onnx", scale=0.5)
    miss = second.flowc.submit(tuned, tmp_path / "c.fca", "--explain")
    assert miss["cache"] == "miss" and miss["code_cache"] == "hit", miss
    assert "weights: 1 tensor(s) differ: w (contents)" in miss["explain"], miss["explain"]

    # Another option: the factor is named; and the job keeps its explanation.
    other = second.flowc.submit(model, tmp_path / "d.fca", "--explain", "-O", "1")
    assert "options: " in other["explain"] and "opt=1" in other["explain"], other["explain"]
    explained = second.flowc.run("explain", other["job_id"]).stdout
    assert "opt=1" in explained

    # Another graph under the same name: the first differing node.
    (tmp_path / "g").mkdir()
    changed = onnx.load(model)
    changed.graph.node[2].op_type = "Tanh"
    onnx.save(changed, tmp_path / "g" / "net.onnx")
    graph = second.flowc.submit(tmp_path / "g" / "net.onnx", tmp_path / "e.fca", "--explain")
    assert "graph: node 2 differs: Tanh sig" in graph["explain"], graph["explain"]


def test_explain_of_an_unknown_job_is_an_error(flowc):
    result = flowc.run("explain", "job-none", check=False)
    assert result.returncode == 3, result.stderr
    assert "no job job-none" in result.stderr


def add_model(directory: pathlib.Path, mib: int) -> pathlib.Path:
    """y = x + W with W of `mib` MiB in an external data file, written in
    pieces (memory does not grow with it)."""
    directory.mkdir(parents=True, exist_ok=True)
    count = mib << 18  # float32 elements
    data = directory / "w.bin"
    with open(data, "wb") as out:
        piece = np.arange(1 << 18, dtype=np.float32)
        for i in range(mib):
            out.write((piece + i).tobytes())
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, count], vals=[])
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(count * 4))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, count])], [w])
    model = directory / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    return model


def peak_rss_mib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


@pytest.mark.parametrize("remote", ["buildgrid"], indirect=True)
def test_a_blob_over_4_mib_goes_through_bytestream(daemon, remote, tmp_path):
    model = add_model(tmp_path / "m", 6)
    first = daemon(*remote_flags(remote), name="first")
    compiled = first.flowc.submit(model, tmp_path / "a.fca")
    second = daemon(*remote_flags(remote), name="second")
    hit = second.flowc.submit(model, tmp_path / "b.fca")
    assert hit["answered_by"] == "remote", hit
    assert hit["artifact_digest"] == compiled["artifact_digest"]
    streams = remote.server.completed_streams()
    artifact = compiled["artifact_digest"].split(":")[1]
    assert ("Write", artifact) in streams and ("Read", artifact) in streams, streams


@pytest.mark.parametrize("remote", ["nginx"], indirect=True)
def test_a_1_gib_model_round_trips_with_the_daemon_memory_flat(daemon, remote, tmp_path):
    model = add_model(tmp_path / "m", 1024)
    first = daemon(*remote_flags(remote), name="first")
    compiled = first.flowc.submit(model, tmp_path / "a.fca", "--thin")
    assert status(first)["bytes_uploaded"] >= 1 << 30
    second = daemon(*remote_flags(remote), name="second")
    hit = second.flowc.submit(model, tmp_path / "b.fca", "--thin")
    assert hit["answered_by"] == "remote" and hit["kernels_compiled"] == 0, hit
    assert hit["artifact_digest"] == compiled["artifact_digest"]
    # The weights came from this machine's copy of the model, not the wire;
    # and the daemon itself never held them.
    assert status(second)["bytes_downloaded"] < 64 << 20, status(second)
    for d in (first, second):
        assert peak_rss_mib(d.process.pid) < 256, peak_rss_mib(d.process.pid)


@pytest.mark.parametrize("remote", ["nginx"], indirect=True)
def test_the_server_killed_mid_upload_leaves_the_cache_consistent(daemon, remote, tmp_path):
    model = add_model(tmp_path / "m", 512)
    d = daemon(*remote_flags(remote), name="d")
    submit = subprocess.Popen(
        [str(BIN / "flowc"), "--cache-dir", str(d.flowc.cache_dir), "--socket",
         str(d.flowc.socket), "submit", str(model), "-o", str(tmp_path / "a.fca"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bodies = remote.server.workdir / "client_body"
    receiving = lambda: any(p.is_file() and p.stat().st_size > 0 for p in bodies.rglob("*"))
    while submit.poll() is None and not receiving():
        time.sleep(0.005)
    assert submit.poll() is None, "the upload ended before the server could be killed"
    remote.kill()
    out, err = submit.communicate(timeout=600)
    assert submit.returncode == 0, err
    assert json.loads(out)["cache"] == "miss"
    counters = status(d)
    # The entries published before the kill are complete; the artifact's
    # was not written.
    assert counters["errors"] >= 1, counters
    # nginx makes ac/ with the first entry: a kill during the first upload
    # leaves none.
    ac = remote.server.root / "ac"
    entries = list(ac.iterdir()) if ac.exists() else []
    assert len(entries) == counters["uploads"], (entries, counters)
    verify = json.loads(d.flowc.run("cache", "verify", "--json").stdout)
    assert verify["corrupt"] == [] and verify["missing_files"] == 0, verify
    again = d.flowc.submit(model, tmp_path / "b.fca")
    assert again["cache"] == "hit" and again["answered_by"] == "local", again
