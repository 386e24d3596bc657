"""The daemon survives whatever happens to a compile: every compile,
inspect and repro runs in a flowc-worker process of its own. Identical
concurrent submits compile once; a client that goes away cancels its
compile; the daemon's socket is its user's alone."""
import concurrent.futures
import json
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import make_models
from conftest import BIN, save


def conv_stack(path: pathlib.Path, layers=24) -> pathlib.Path:
    """Convolutions whose channel counts all differ: as many distinct
    kernels as layers, so compiling it takes seconds."""
    rng = np.random.default_rng(7)
    nodes, inits, channels, name = [], [], 3, "x"
    for i in range(layers):
        out = 4 + i
        w = rng.standard_normal((out, channels, 3, 3)).astype(np.float32) * 0.1
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [name, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        name, channels = f"r{i}", out
    graph = helper.make_graph(
        nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, channels, 16, 16])], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def big_external_model(directory: pathlib.Path, megabytes=384) -> pathlib.Path:
    count = megabytes * (1 << 20) // 4
    weight = numpy_helper.from_array(np.ones((1, count), np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, count])], [weight])
    path = directory / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path,
              save_as_external_data=True, location="big.data")
    return path


def daemon_pid(flowc) -> int:
    return json.loads(flowc.run("status", "--json").stdout)["pid"]


def workers_of(pid: int, tasks=False):
    """The flowc-worker processes whose parent is `pid`: the job processes
    (no arguments), or with `tasks` the local pool's task processes
    (`serve`)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        if name != "flowc-worker" or parent != pid:
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")[1:]
        except OSError:
            continue
        if (args[:1] in ([b"serve"], [b"task"])) == tasks:
            found.append(int(entry.name))
    return found


def wait_for(predicate, seconds=60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


def submit_process(flowc, model, out):
    return subprocess.Popen(
        [str(BIN / "flowc"), "--cache-dir", str(flowc.cache_dir), "--socket",
         str(flowc.socket), "submit", str(model), "-o", str(out), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_worker_that_crashes_fails_its_job_alone(flowc, tmp_path):
    model = conv_stack(tmp_path / "stack.onnx")
    daemon = daemon_pid(flowc)
    submit = submit_process(flowc, model, tmp_path / "stack.fca")
    worker = wait_for(lambda: workers_of(daemon))
    assert worker, "no flowc-worker started"
    os.kill(worker[0], signal.SIGSEGV)
    _, err = submit.communicate(timeout=120)
    assert submit.returncode == 1, err
    assert "died of SIGSEGV" in err and "the daemon and other jobs are unaffected" in err, err
    assert str(model) in err
    # The daemon is the same process and compiles the same model next time.
    assert daemon_pid(flowc) == daemon
    result = flowc.submit(model, tmp_path / "again.fca")
    assert result["cache"] == "miss"
    flowc.run("cache", "verify")


def test_a_worker_killed_for_memory_is_resource_exhausted(flowc, tmp_path):
    model = conv_stack(tmp_path / "stack.onnx")
    daemon = daemon_pid(flowc)
    submit = submit_process(flowc, model, tmp_path / "stack.fca")
    worker = wait_for(lambda: workers_of(daemon))
    os.kill(worker[0], signal.SIGKILL)
    _, err = submit.communicate(timeout=120)
    assert submit.returncode == 5, err
    assert "SIGKILL" in err and "out of memory" in err, err
    assert daemon_pid(flowc) == daemon


def test_a_file_truncated_while_it_is_read_is_data_loss(flowc, tmp_path):
    model = big_external_model(tmp_path)
    data = tmp_path / "big.data"
    original = data.read_bytes()
    daemon = daemon_pid(flowc)
    outcomes = []
    for attempt in range(3):
        flowc.run("cache", "clear")
        data.write_bytes(original)
        submit = subprocess.Popen(
            [str(BIN / "flowc"), "--cache-dir", str(flowc.cache_dir), "--socket",
             str(flowc.socket), "submit", str(model), "-o", str(tmp_path / "big.fca"),
             "--progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Truncated once the worker has begun reading it.
        for line in submit.stderr:
            if "ingest" in line:
                os.truncate(data, 4096)
                break
        _, err = submit.communicate(timeout=300)
        outcomes.append((submit.returncode, err))
        assert submit.returncode in (0, 3), err
        if submit.returncode == 3:
            assert "big.data" in err, err
            assert "shrank while it was being read" in err or "out of range" in err, err
    assert any("shrank" in err for _, err in outcomes), outcomes
    assert daemon_pid(flowc) == daemon
    # Nothing half-read was kept: every blob is whole.
    flowc.run("cache", "verify")
    data.write_bytes(original)
    assert flowc.submit(model, tmp_path / "whole.fca")["cache"] == "miss"


def test_identical_concurrent_submits_compile_once(flowc, tmp_path):
    model = conv_stack(tmp_path / "stack.onnx", layers=12)
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(
            lambda i: flowc.submit(model, tmp_path / f"out{i}.fca"), range(20)))
    assert len({r["artifact_digest"] for r in results}) == 1
    compiled = {r["job_id"] for r in results if r["cache"] == "miss"}
    assert len(compiled) == 1, results
    assert sum(1 for r in results if r["kernels_compiled"] > 0) == \
        sum(1 for r in results if r["cache"] == "miss")
    stats = json.loads(flowc.run("cache", "stats", "--json").stdout)
    assert stats["kinds"]["artifact"]["misses"] <= 2, stats


def test_a_client_that_goes_away_cancels_its_compile(flowc, tmp_path):
    model = conv_stack(tmp_path / "stack.onnx", layers=40)
    daemon = daemon_pid(flowc)
    submit = submit_process(flowc, model, tmp_path / "stack.fca")
    assert wait_for(lambda: workers_of(daemon))
    submit.send_signal(signal.SIGINT)
    submit.communicate(timeout=60)
    assert wait_for(lambda: not workers_of(daemon) and not workers_of(daemon, tasks=True),
                    seconds=30), "the worker kept compiling"
    assert daemon_pid(flowc) == daemon
    assert flowc.submit(model, tmp_path / "stack.fca")["cache"] == "miss"


def test_inspect_and_repro_run_in_a_worker(flowc, tmp_path):
    model = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "cnn.onnx")
    daemon = daemon_pid(flowc)
    assert "Conv" in flowc.run("inspect", model).stdout
    flowc.run("repro", model, "-o", tmp_path / "repro")
    assert (tmp_path / "repro" / "graph.mlirbc").stat().st_size > 0
    assert daemon_pid(flowc) == daemon


def test_the_socket_is_its_owners_alone(flowc):
    mode = flowc.socket.stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as another user")


@needs_root
def test_a_socket_another_user_owns_is_refused(flowc, tmp_path):
    nobody = pwd.getpwnam("nobody")
    os.chown(flowc.socket, nobody.pw_uid, nobody.pw_gid)
    try:
        refused = flowc.run("status", check=False)
        assert refused.returncode == 3, refused.stderr
        assert f"belongs to uid {nobody.pw_uid}" in refused.stderr, refused.stderr
        assert "--trust-daemon" in refused.stderr
        trusted = flowc.run("--trust-daemon", "status", check=False)
        assert trusted.returncode == 0, trusted.stderr
    finally:
        os.chown(flowc.socket, 0, 0)


@needs_root
def test_another_user_cannot_have_the_daemon_read_for_it(flowc, tmp_path):
    """A model only root can read: another user's flowc says so, and a client
    of its own making cannot even connect to root's daemon to ask."""
    secret_dir = tmp_path / "private"
    secret_dir.mkdir(mode=0o700)
    secret = save(make_models.make_cnn(np.random.default_rng(0)), secret_dir / "secret.onnx")
    os.chmod(secret, 0o600)
    own = tmp_path / "nobody-cache"
    own.mkdir()
    os.chown(own, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    env = {"PATH": os.environ["PATH"], "FLOWC_AUTOSTART": "0"}
    for args in (["submit", str(secret), "-o", str(own / "out.fca")], ["inspect", str(secret)]):
        result = subprocess.run(
            [*as_nobody, str(BIN / "flowc"), "--cache-dir", str(own), "--socket",
             str(flowc.socket), "--trust-daemon", *args], capture_output=True, text=True,
            timeout=120, env=env)
        assert result.returncode in (3, 5), result.stderr
        assert "permission denied" in result.stderr.lower(), result.stderr
        assert not (own / "out.fca").exists()
    probe = subprocess.run(
        [*as_nobody, "/usr/bin/python3", "-c",
         "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])",
         str(flowc.socket)], capture_output=True, text=True, timeout=60, env=env)
    assert probe.returncode != 0 and "PermissionError" in probe.stderr, probe.stderr


def test_fifos_are_refused_at_once_wherever_they_are_read(flowc, tmp_path):
    """An external data file, an inspected file and a --input that are FIFOs
    nobody writes: each command answers at once, and two such submits do
    not stall the daemon's queue."""
    models = []
    for name in ("a", "b"):
        directory = tmp_path / name
        directory.mkdir()
        model = big_external_model(directory, megabytes=1)
        (directory / "big.data").unlink()
        os.mkfifo(directory / "big.data")
        models.append(model)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(
            lambda m: flowc.run("submit", m, "-o", m.with_suffix(".fca"), check=False),
            models))
    for result in results:
        assert result.returncode == 3, result.stderr
        assert "big.data" in result.stderr and "not a regular file" in result.stderr, \
            result.stderr
    fifo = tmp_path / "thing.fca"
    os.mkfifo(fifo)
    inspect = flowc.run("inspect", fifo, check=False)
    assert inspect.returncode == 3 and "not a regular file" in inspect.stderr, inspect.stderr
    model = save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "cnn.onnx")
    flowc.submit(model, tmp_path / "cnn.fca")
    run = flowc.run("run", tmp_path / "cnn.fca", "--input", f"image={fifo}", check=False)
    assert run.returncode == 3 and "not a regular file" in run.stderr, run.stderr
    # The queue still moves.
    assert flowc.submit(conv_stack(tmp_path / "s.onnx", layers=2), tmp_path / "s.fca")


def test_the_worker_refuses_anything_but_a_task_from_its_daemon():
    args = subprocess.run([str(BIN / "flowc-worker"), "--bogus"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert args.returncode == 2 and "usage: flowc-worker task" in args.stderr, args.stderr
    for bad, message in ((["task"], "--input and --output are required"),
                         (["task", "--input"], "--input needs a value"),
                         (["task", "--input", "i", "--output", "o", "--memory-limit", "x"],
                          "--memory-limit: 'x' is not a positive number of bytes"),
                         (["task", "--frobnicate", "1"], "unknown option '--frobnicate'"),
                         (["serve", "--input", "i"], "serve runs the tasks flowcd sends it")):
        run = subprocess.run([str(BIN / "flowc-worker"), *bad], capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert run.returncode == 2 and message in run.stderr, (bad, run.stderr)
    # A pool process takes task directories only.
    serve = subprocess.run([str(BIN / "flowc-worker"), "serve"], input=b"\x05\x00\x00\x00ab",
                           capture_output=True, timeout=60)
    assert serve.returncode == 2 and b"not a task directory on stdin" in serve.stderr, \
        serve.stderr
    missing = subprocess.run([str(BIN / "flowc-worker"), "task", "--input", "/nonexistent",
                              "--output", "/tmp/o"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    assert missing.returncode == 1 and "/nonexistent/task.json" in missing.stderr, \
        missing.stderr
    for garbage in (b"", b"\x05\x00\x00\x00ab", b"\xff\xff\xff\x7f"):
        run = subprocess.run([str(BIN / "flowc-worker")], input=garbage, capture_output=True,
                             timeout=60)
        assert run.returncode == 2, run.stderr
        assert b"no task on stdin" in run.stderr, run.stderr
