"""Compile tasks as REAPI actions on a real engine: BuildGrid 0.9.1 on
PostgreSQL with three bots (tests/reapi/), the daemon's --remote-executor
pointed at it. Kernels spread over the bots and give the local digest; a
bot killed mid-task loses its lease and another runs the task; a second
daemon with an empty cache gets every task from the engine's action cache;
the engine going down fails the job, or falls back to local workers."""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from conftest import BIN, ROOT, Flowc
from test_isolation import wait_for
from test_tasks import daemon, elementwise_chain  # noqa: F401 (a fixture)

sys.path.insert(0, str(ROOT / "tests" / "reapi"))
from cluster import cluster_fixture  # noqa: E402

buildgrid = cluster_fixture(bots=3, scope="module")


def remote_daemon(daemon, cluster, *flags, name="d"):
    return daemon("--remote-executor", cluster.url, "--remote-instance", cluster.instance,
                  *flags, name=name)


def local_digest(tmp_path: pathlib.Path, model: pathlib.Path, *options) -> str:
    alone = Flowc(tmp_path / "alone")
    out = tmp_path / (model.stem + ".local.fca")
    return json.loads(alone.run("compile", model, "-o", out, "--json", *options).stdout)[
        "artifact_digest"]


def submit_process(d, model, out, *options):
    return subprocess.Popen(
        [str(BIN / "flowc"), "--cache-dir", str(d.flowc.cache_dir), "--socket",
         str(d.flowc.socket), "submit", str(model), "-o", str(out), "--json", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_real_model_compiles_on_the_bots_with_the_digest_of_a_local_compile(
        daemon, buildgrid, real_models, tmp_path):
    # SqueezeNet's generated kernels (the copies that join its Fire modules'
    # concatenations) are codegen tasks; ResNet-18 is library calls only.
    model = real_models[13] / "squeezenet1_1.onnx"
    before = buildgrid.executions()
    d = remote_daemon(daemon, buildgrid)
    result = d.flowc.submit(model, tmp_path / "squeezenet.fca")
    [job] = d.jobs()
    tasks = job["tasks"]
    assert tasks[0]["kind"] == "plan" and len(tasks) == 1 + result["kernels_compiled"]
    ran = {t["executor"] for t in tasks}
    assert all(e.startswith("remote bot") for e in ran), (tasks, buildgrid.logs())
    assert buildgrid.executions() - before == len(tasks)
    bots = {bot for _, bot, _ in buildgrid.execution_records()[before:]}
    assert len(bots) >= 2, f"every task ran on {bots}"
    remote = d.workers()["remote"]
    assert remote["executed"] == len(tasks) and remote["cache_hits"] == 0, remote
    assert remote["state"] == "ok" and remote["bytes_uploaded"] > 0
    assert result["artifact_digest"] == local_digest(tmp_path, model)


def test_a_second_daemon_gets_its_tasks_from_the_engines_action_cache(
        daemon, buildgrid, tmp_path):
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=6)
    first = remote_daemon(daemon, buildgrid, name="first").flowc.submit(model, tmp_path / "a.fca")
    executed = buildgrid.executions()
    second = remote_daemon(daemon, buildgrid, name="second")
    again = second.flowc.submit(model, tmp_path / "b.fca")
    assert again["cache"] == "miss", "the second daemon's cache is empty"
    assert buildgrid.executions() == executed, "a task ran again"
    [job] = second.jobs()
    assert {t["executor"] for t in job["tasks"]} == {"remote action cache"}, job
    remote = second.workers()["remote"]
    assert remote["executed"] == 0 and remote["cache_hits"] == len(job["tasks"]), remote
    assert again["artifact_digest"] == first["artifact_digest"]


def test_a_bot_killed_mid_task_loses_its_lease_and_another_bot_runs_it(
        daemon, buildgrid, tmp_path):
    model = elementwise_chain(tmp_path / "long.onnx", blocks=40)
    d = remote_daemon(daemon, buildgrid)
    submit = submit_process(d, model, tmp_path / "long.fca")

    def busy_bot():
        for name, pid in buildgrid.bot_pids().items():
            for entry in pathlib.Path("/proc").iterdir():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                parent = int(stat[stat.rindex(")") + 2:].split()[1])
                if parent == pid and "flowc-worker" in stat:
                    return name
        return None

    victim = wait_for(busy_bot, seconds=120)
    assert victim, buildgrid.logs()
    buildgrid.kill_bot(victim)
    try:
        out, err = submit.communicate(timeout=240)
        assert submit.returncode == 0, err + buildgrid.logs()
        result = json.loads(out)
        [job] = d.jobs()
        assert all(t["state"] == "done" for t in job["tasks"]), job
        # The killed bot's task finished on another bot.
        assert any(t["executor"] not in ("remote " + victim, "remote action cache")
                   for t in job["tasks"]), job
        assert result["artifact_digest"] == local_digest(tmp_path, model)
    finally:
        buildgrid.start_bot(victim)


def test_the_engine_going_down_fails_the_job_or_falls_back_to_local_workers(
        daemon, buildgrid, tmp_path):
    model = elementwise_chain(tmp_path / "down.onnx", blocks=30)
    d = remote_daemon(daemon, buildgrid)
    submit = submit_process(d, model, tmp_path / "down.fca")
    assert wait_for(lambda: any(t["state"] == "running" for job in d.jobs()
                                for t in job["tasks"]), seconds=120)
    buildgrid.stop_server()
    try:
        _, err = submit.communicate(timeout=300)
        assert submit.returncode == 5, err
        assert f"remote executor {buildgrid.url}" in err, err
        assert "failed" in d.jobs()[0]["state"]
        # The same engine down, and a daemon that may run tasks itself.
        fallback = remote_daemon(daemon, buildgrid, "--remote-fallback", "local",
                                 name="fallback")
        result = fallback.flowc.submit(model, tmp_path / "fallback.fca")
        remote = fallback.workers()["remote"]
        assert remote["fallbacks"] >= 1 and remote["fallback"] == "local", remote
        assert remote["state"] != "ok"
        assert result["artifact_digest"] == local_digest(tmp_path, model)
    finally:
        buildgrid.start_server()
