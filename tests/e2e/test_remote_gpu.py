"""The farm's GPUs (flowcd --remote-gpu) on BuildGrid 0.9.1 with two bots,
bot2 advertising `gpu=NVIDIA H200 sm_90`, whose CAS and action cache also
serve as the remote cache tier.

A compile on a machine without the GPU sends each measure task to bot2 and
no other; bot2 has no GPU here, so each fails there saying so, and the
compile goes on with trial runs left to sessions. A GPU no worker offers
costs the compile its search budget, no more. Records a machine's sessions
made reach another machine's compiles through the remote tier."""
import json
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import make_models
from conftest import BIN, ROOT, save
from test_cuda import cuda_toolkit  # noqa: F401 (an autouse fixture)
from test_tasks import daemon  # noqa: F401 (a fixture)

sys.path.insert(0, str(ROOT / "tests" / "reapi"))
from cluster import cluster_fixture  # noqa: E402

H200 = "NVIDIA H200 sm_90"
buildgrid = cluster_fixture(bots=2, scope="module", bot_platform={"bot2": {"gpu": H200}})


@pytest.fixture
def cnn(tmp_path, flowc):
    if "cuDNN 9" not in flowc.run("--version").stdout:
        pytest.skip("no cuDNN here: a compile cannot list the convolutions' candidates")
    return save(make_models.make_cnn(np.random.default_rng(21)), tmp_path / "cnn.onnx")


def gpu_daemon(daemon, cluster, *gpus, name="d", flags=()):
    flags = ["--remote-executor", cluster.url, "--remote-instance", cluster.instance, *flags]
    for gpu in gpus:
        flags += ["--remote-gpu", gpu]
    return daemon(*flags, name=name)


def measure_tasks(d):
    [job] = d.jobs()
    return [t for t in job["tasks"] if t["kind"] == "measure"]


def submit_unmeasured(d, cnn, artifact):
    """Submits the CNN for the H200: the result and its measure tasks, each
    failed (the compile goes on without their records)."""
    result = d.flowc.submit(cnn, artifact, "--target", "cuda:sm_90", "--search-budget", "120")
    search = result["search"]
    assert search["tunable_kernels"] >= 1 and search["measured_kernels"] == 0, search
    measures = measure_tasks(d)
    assert len(measures) == search["tunable_kernels"], measures
    assert all(task["state"] == "failed" for task in measures), measures
    return result, measures


def test_measure_tasks_go_to_the_worker_offering_the_gpu(daemon, buildgrid, cnn, tmp_path):
    d = gpu_daemon(daemon, buildgrid, H200)
    assert d.workers()["remote_gpus"] == [H200]
    assert f"GPU {H200} (workers offering gpu={H200})" in d.flowc.run("workers").stdout
    before = buildgrid.executions()
    result, measures = submit_unmeasured(d, cnn, tmp_path / "a.fca")
    for task in measures:
        assert "remote bot2 failed" in task["error"], task
        assert f"a measure task for the GPU 'gpu {H200}' reached a machine with no GPU" in \
            task["error"], task
    # The engine ran each one on bot2, the only bot offering the GPU.
    ran = buildgrid.execution_records()[before:]
    failed_on = [bot for _, bot, code in ran if code != 0]
    assert failed_on == ["bot2"] * len(measures), (ran, buildgrid.logs())
    # The daemon keys hits as its jobs do: the same submit is answered at once.
    again = d.flowc.submit(cnn, tmp_path / "b.fca", "--target", "cuda:sm_90")
    assert again["cache"] == "hit" and again["artifact_digest"] == result["artifact_digest"]


def test_a_gpu_no_worker_offers_costs_the_search_budget(daemon, buildgrid, cnn, tmp_path):
    b200 = "NVIDIA B200 sm_100"
    d = gpu_daemon(daemon, buildgrid, b200)
    result = d.flowc.submit(cnn, tmp_path / "a.fca", "--target", "cuda:sm_100",
                            "--search-budget", "3")
    assert result["search"]["measured_kernels"] == 0, result["search"]
    measures = measure_tasks(d)
    assert measures, d.jobs()
    for task in measures:
        assert task["state"] == "failed", task
        assert (f"did not finish it in 3 s (its deadline; it needs a worker offering "
                f"gpu={b200})") in task["error"], task


def test_the_local_fallback_takes_no_task_for_the_farms_gpu(daemon, buildgrid, cnn, tmp_path):
    """With the engine down, --remote-fallback local runs the compile's
    tasks here, but not the measure tasks for a GPU this machine lacks:
    they fail saying so, and the compile goes on without their records."""
    d = gpu_daemon(daemon, buildgrid, H200, name="fallback",
                   flags=["--remote-fallback", "local"])
    buildgrid.stop_server()
    try:
        _, measures = submit_unmeasured(d, cnn, tmp_path / "a.fca")
        for task in measures:
            assert (f"not run locally (--remote-fallback=local): it needs the GPU '{H200}', "
                    "which this machine lacks") in task["error"], task
        [job] = d.jobs()
        assert any(t["executor"].startswith("local pid") for t in job["tasks"]
                   if t["kind"] != "measure"), job
        remote = d.workers()["remote"]
        assert remote["fallbacks"] >= 1, remote
    finally:
        buildgrid.start_server()


def test_remote_gpus_need_an_engine_and_a_name_with_its_capability(tmp_path):
    for flags, message in (
            (["--remote-gpu", H200], "--remote-gpu needs --remote-executor or --remote-cache"),
            (["--remote-executor", "grpc://127.0.0.1:1", "--remote-gpu", "NVIDIA H200"],
             "GPU 'NVIDIA H200': no name followed by ' sm_NN'")):
        run = subprocess.run([str(BIN / "flowcd"), "--cache-dir", str(tmp_path / "c"),
                              *flags], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and message in run.stderr, (flags, run.stderr)


def tuning_versions(flowc):
    """The versions part of this build's GPU records, as sessions key them."""
    libraries = re.search(r"CUDA: (cuDNN [0-9.]+, cuBLASLt [0-9.]+)",
                          flowc.run("--version").stdout).group(1)
    abi = re.search(r"kKernelAbiVersion = (\d+);",
                    (ROOT / "runtime/abi/include/flowc/runtime/KernelAbi.h").read_text())
    trials = re.search(r"kGpuTrialsVersion = (\d+);",
                       (ROOT / "runtime/include/flowc/runtime/Tuning.h").read_text())
    return f"{libraries}; kernel abi {abi.group(1)}; trials {trials.group(1)}"


def session_records(signatures, versions):
    """Records as this machine's `flowc run` trial runs would leave them."""
    candidates = {"library.conv2d": "cudnn:engine=3;knobs=",
                  "library.matmul": "cublaslt:algo=21;tile=15;stages=22;splitk=1;"
                                    "reduction=0;swizzle=0;custom=0;inner=0;cluster=0"}
    return {"format": "flowc.tuning.v1", "records": [{
        "signature": signature, "device": f"gpu {H200}", "versions": versions,
        "candidate": candidates[signature.split(":")[0]], "time_ns": 1000 + i,
        "spread_ns": 0, "samples": 3, "separated": False, "noise": 0.0,
        "measured_ms": 1, "host": socket.gethostname()} for i, signature in enumerate(signatures)]}


def test_records_of_a_machines_sessions_reach_another_machines_compiles(
        daemon, buildgrid, cnn, tmp_path):
    # The signatures of the model's GPU kernels, as its measure tasks name them.
    probe = gpu_daemon(daemon, buildgrid, H200, name="probe")
    probe.flowc.submit(cnn, tmp_path / "p.fca", "--target", "cuda:sm_90", "--search-budget", "60")
    signatures = sorted(t["name"].removeprefix("measure ") for t in measure_tasks(probe))
    assert signatures, probe.jobs()

    # a: sessions here left records of the H200 in its cache; they decide
    # its compile, which also shares them.
    cache = ["--remote-cache", buildgrid.url, "--remote-instance", buildgrid.instance]
    a = daemon("--remote-gpu", H200, *cache, name="a")
    document = tmp_path / "records.json"
    document.write_text(json.dumps(session_records(signatures, tuning_versions(a.flowc))))
    a.flowc.run("tuning", "import", document)
    compiled = a.flowc.submit(cnn, tmp_path / "a.fca", "--target", "cuda:sm_90")
    assert compiled["cache"] == "miss"
    assert compiled["search"]["tuned_kernels"] == len(signatures), compiled["search"]

    # b: no GPU, no engine, its own empty cache, the same remote tier.
    b = daemon("--remote-gpu", H200, *cache, name="b")
    result = b.flowc.submit(cnn, tmp_path / "c.fca", "--target", "cuda:sm_90")
    assert result["search"]["tuned_kernels"] == len(signatures), result["search"]
    assert result["search"]["measured_kernels"] == 0
    listed = json.loads(b.flowc.run("tuning", "ls", "--json").stdout)
    assert sorted(r["signature"] for r in listed) == signatures
    assert {r["host"] for r in listed} == {socket.gethostname()}
    workers = b.workers()
    assert workers["remote"] is None and workers["remote_gpus"] == [H200], workers
    assert f"GPU {H200} (its records from the remote cache" in b.flowc.run("workers").stdout
