"""A compile is a DAG of tasks (plan, codegen per kernel) that the daemon
runs on its local pool of flowc-worker processes: a thread budget of one
thread per task process and at most --workers of them, a crashed task
retried once on a fresh process, `flowc jobs` and `flowc workers` to see
where tasks ran; and `flowc compile`, the same compile with no daemon."""
import concurrent.futures
import json
import os
import pathlib
import signal
import subprocess
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import BIN, Flowc, save
from test_isolation import daemon_pid, wait_for, workers_of


def elementwise_chain(path: pathlib.Path, blocks=12, last="Sigmoid") -> pathlib.Path:
    """Blocks of "scale, shift, an activation" with a reduction between
    them, each with its own constants: many distinct loop kernels."""
    rng = np.random.default_rng(3)
    nodes, inits, name = [], [], "x"
    activations = ["Relu", "Tanh", "Sigmoid", "Abs"]
    for i in range(blocks):
        inits.append(numpy_helper.from_array(
            rng.standard_normal((1, 64 + i)).astype(np.float32), f"s{i}"))
        inits.append(numpy_helper.from_array(
            rng.standard_normal((32, 1)).astype(np.float32), f"b{i}"))
        nodes += [helper.make_node("Mul", [name, f"s{i}"], [f"m{i}"], name=f"mul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node(activations[i % 4], [f"a{i}"], [f"t{i}"], name=f"act{i}"),
                  helper.make_node("Pad", [f"t{i}", f"p{i}"], [f"y{i}"], name=f"pad{i}")]
        inits.append(numpy_helper.from_array(np.array([0, 0, 0, 1], np.int64), f"p{i}"))
        name = f"y{i}"
    nodes.append(helper.make_node(last, [name], ["out"], name="last"))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [32, 64 + blocks])], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def relu_model(path: pathlib.Path) -> pathlib.Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


class Daemon:
    """flowcd started by hand, with flags and an environment of the test's."""

    def __init__(self, tmp: pathlib.Path, *flags, env=None):
        self.flowc = Flowc(tmp)
        self.log = tmp / "flowcd.log"
        self.process = subprocess.Popen(
            [str(BIN / "flowcd"), "--cache-dir", str(self.flowc.cache_dir), "--socket",
             str(self.flowc.socket), "--log-file", str(self.log), *map(str, flags)],
            env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        assert wait_for(lambda: self.flowc.socket.exists() or self.process.poll() is not None,
                        seconds=30)
        assert self.process.poll() is None, self.process.stderr.read()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)

    def jobs(self):
        return json.loads(self.flowc.run("jobs", "--json").stdout)["jobs"]

    def workers(self):
        return json.loads(self.flowc.run("workers", "--json").stdout)


@pytest.fixture
def daemon(tmp_path):
    """Starts daemons, each with a cache of its own (in tmp_path/NAME)."""
    started = []

    def start(*flags, env=None, name="d"):
        (tmp_path / name).mkdir(exist_ok=True)
        started.append(Daemon(tmp_path / name, *flags, env=env))
        return started[-1]

    yield start
    for each in started:
        each.stop()


def test_a_compile_runs_as_a_plan_and_a_codegen_task_per_kernel(daemon, tmp_path):
    d = daemon()
    model = elementwise_chain(tmp_path / "chain.onnx")
    result = d.flowc.submit(model, tmp_path / "chain.fca")
    assert result["cache"] == "miss" and result["kernels_compiled"] > 4
    [job] = d.jobs()
    assert job["id"] == result["job_id"] and job["state"] == "done", job
    kinds = [task["kind"] for task in job["tasks"]]
    assert kinds[0] == "plan" and kinds.count("codegen") == result["kernels_compiled"], kinds
    pids = set()
    for task in job["tasks"]:
        assert task["state"] == "done" and task["executor"].startswith("local pid "), task
        pids.add(task["executor"])
        assert task["input_bytes"] > 0 and task["output_bytes"] > 0, task
        assert task["attempts"] == 1
    # Pooled processes: a process runs many tasks, and at most one per slot
    # (core) exists.
    assert len(pids) <= os.cpu_count() < len(kinds), pids
    workers = d.workers()
    assert workers["tasks_run"] == len(kinds) and workers["tasks_retried"] == 0
    assert workers["remote"] is None
    text = d.flowc.run("jobs").stdout
    assert result["job_id"] in text and f"{len(kinds)} local" in text, text
    # The artifact runs and matches the reference compile (-O0 is every op
    # in generated loops, compiled in-process by `flowc compile`).
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    ours = d.flowc.execute(tmp_path / "chain.fca", {"x": x})["out"]
    reference = tmp_path / "reference.fca"
    d.flowc.run("compile", model, "-o", reference, "-O", "0")
    expected = d.flowc.execute(reference, {"x": x})["out"]
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5)


def test_flowc_compile_makes_the_daemons_artifact_without_a_daemon(daemon, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=4)
    alone = Flowc(tmp_path / "alone")
    compiled = json.loads(alone.run("compile", model, "-o", tmp_path / "alone.fca",
                                    "--json").stdout)
    assert compiled["cache"] == "miss" and compiled["kernels_compiled"] > 0, compiled
    assert not alone.socket.exists(), "flowc compile started a daemon"
    again = json.loads(alone.run("compile", model, "-o", tmp_path / "again.fca",
                                 "--json").stdout)
    assert again["cache"] == "hit" and again["artifact_digest"] == compiled["artifact_digest"]
    # A daemon with a cache of its own makes the same bytes.
    d = daemon()
    submitted = d.flowc.submit(model, tmp_path / "daemon.fca")
    assert submitted["artifact_digest"] == compiled["artifact_digest"]
    assert (tmp_path / "alone.fca").read_bytes() == (tmp_path / "daemon.fca").read_bytes()


def test_flowc_compile_names_what_is_wrong(tmp_path):
    alone = Flowc(tmp_path)
    missing = alone.run("compile", tmp_path / "nope.onnx", check=False)
    assert missing.returncode == 3 and "nope.onnx" in missing.stderr, missing.stderr
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    broken = alone.run("compile", bad, "-o", tmp_path / "bad.fca", check=False)
    assert broken.returncode != 0 and "bad.onnx" in broken.stderr, broken.stderr
    model = relu_model(tmp_path / "relu.onnx")
    into_dir = alone.run("compile", model, "-o", tmp_path, check=False)
    assert into_dir.returncode == 3 and "is a directory" in into_dir.stderr, into_dir.stderr
    shape = alone.run("compile", model, "--input-shape", "x=2y", check=False)
    assert shape.returncode == 3 and "x=2y" in shape.stderr, shape.stderr


def test_a_task_that_crashes_twice_fails_only_its_job(daemon, tmp_path):
    # The test hook segfaults every codegen task of a kernel with an Abs.
    d = daemon(env={"FLOWC_WORKER_TEST_CRASH": "math.absf"})
    pid = daemon_pid(d.flowc)
    crashing = elementwise_chain(tmp_path / "abs.onnx", blocks=2, last="Abs")
    run = d.flowc.run("submit", crashing, "-o", tmp_path / "abs.fca", check=False)
    assert run.returncode == 1, run.stderr
    assert "codegen flowc_loops_" in run.stderr and "died of SIGSEGV" in run.stderr, run.stderr
    assert "twice" in run.stderr and "the daemon and other jobs carry on" in run.stderr
    workers = d.workers()
    assert workers["tasks_retried"] >= 1 and workers["tasks_failed"] >= 1, workers
    failed = [job for job in d.jobs() if job["state"] == "failed"]
    assert failed and any(task["attempts"] == 2 for task in failed[0]["tasks"]), failed
    # Same daemon; a model without an Abs compiles.
    assert daemon_pid(d.flowc) == pid
    assert d.flowc.submit(relu_model(tmp_path / "relu.onnx"))["cache"] == "miss"


def test_a_task_process_killed_mid_task_runs_again(daemon, tmp_path):
    d = daemon("--workers", "1")
    pid = daemon_pid(d.flowc)
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=16)
    submit = subprocess.Popen(
        [str(BIN / "flowc"), "--cache-dir", str(d.flowc.cache_dir), "--socket",
         str(d.flowc.socket), "submit", str(model), "-o", str(tmp_path / "chain.fca"),
         "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The pool's process of a codegen task that is running.
    def codegen_task():
        for job in d.jobs():
            for task in job["tasks"]:
                if task["kind"] == "codegen" and task["state"] == "running":
                    return int(task["executor"].split()[-1])
        return None

    victim = wait_for(codegen_task, seconds=120)
    assert victim, "no codegen task seen running"
    assert victim in workers_of(pid, tasks=True)
    os.kill(victim, signal.SIGKILL)
    out, err = submit.communicate(timeout=300)
    assert submit.returncode == 0, err
    result = json.loads(out)
    workers = d.workers()
    assert workers["tasks_retried"] >= 1 and workers["tasks_failed"] == 0, workers
    retried = [t for t in d.jobs()[-1]["tasks"] if t["attempts"] == 2]
    assert retried, d.jobs()[-1]
    # The same artifact as a compile nobody disturbed.
    alone = Flowc(tmp_path / "alone")
    clean = json.loads(alone.run("compile", model, "-o", tmp_path / "clean.fca",
                                 "--json").stdout)
    assert clean["artifact_digest"] == result["artifact_digest"]


def threads_of(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def test_the_thread_budget_holds(daemon, tmp_path):
    d = daemon("--workers", "2")
    pid = daemon_pid(d.flowc)
    models = [elementwise_chain(tmp_path / f"chain{i}.onnx", blocks=10 + i) for i in range(3)]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        running = [pool.submit(d.flowc.submit, m, m.with_suffix(".fca")) for m in models]
        most_tasks, most_threads = 0, 0
        while not all(f.done() for f in running):
            tasks = workers_of(pid, tasks=True)
            most_tasks = max(most_tasks, len(tasks))
            most_threads = max([most_threads] + [threads_of(t) for t in tasks])
            time.sleep(0.01)
        for f in running:
            f.result()
    assert 1 <= most_tasks <= 2, most_tasks
    # A task process runs one thread: tasks x threads <= cores.
    assert most_threads == 1, most_threads
    assert d.workers()["slots"] == 2


def test_eight_identical_submits_compile_once(daemon, tmp_path):
    d = daemon()
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=8)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(
            lambda i: d.flowc.submit(model, tmp_path / f"out{i}.fca"), range(8)))
    assert len({r["artifact_digest"] for r in results}) == 1
    assert len(d.jobs()) == 1, d.jobs()
    assert d.workers()["tasks_run"] == len(d.jobs()[0]["tasks"])


def test_daemon_flags_of_the_executors_are_checked(tmp_path):
    for flags, message in (
            (["--remote-executor", "http://x:1"], "--remote-executor"),
            (["--remote-executor", "grpc://host"], "--remote-executor"),
            (["--remote-instance", "main"],
             "--remote-instance needs --remote-executor or --remote-cache"),
            (["--remote-executor", "grpc://127.0.0.1:1", "--remote-fallback", "maybe"],
             "remote-fallback (local or none)"),
            (["--remote-executor", "grpc://127.0.0.1:1", "--remote-platform", "novalue"],
             "'novalue' is not KEY=VALUE"),
            (["--remote-executor", "grpc://127.0.0.1:1", "--remote-jobs", "0"],
             "invalid remote job count '0' (1 to 4096)"),
            (["--task-memory-limit", "1M"], "below the 64 MiB minimum")):
        run = subprocess.run([str(BIN / "flowcd"), "--cache-dir", str(tmp_path / "c"),
                              *flags], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and message in run.stderr, (flags, run.stderr)


def test_the_task_memory_limit_caps_each_pool_process(daemon, tmp_path):
    d = daemon("--task-memory-limit", "96M")
    pid = daemon_pid(d.flowc)
    d.flowc.submit(elementwise_chain(tmp_path / "chain.onnx", blocks=3))
    # The pool's processes wait for the next task, limited.
    pool = workers_of(pid, tasks=True)
    assert pool
    for process in pool:
        limits = pathlib.Path(f"/proc/{process}/limits").read_text()
        [line] = [l for l in limits.splitlines() if l.startswith("Max data size")]
        assert line.split()[3] == str(96 << 20), line
