"""The REAPI test engine itself: BuildGrid on PostgreSQL with two bots runs
real Actions, serves repeats from its action cache, and moves the lease of a
SIGKILLed bot to the other one. Runs under the e2e venv (no grpc there):
the REAPI calls go through tests/reapi/client.py in .venv-reapi.

  /work/main/.venv/bin/python -m pytest -q tests/reapi/test_cluster.py
"""

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import BuildGridCluster, ClusterError, cluster_fixture, reapi_venv  # noqa: E402

CLIENT = Path(__file__).resolve().parent / "client.py"

cluster = cluster_fixture(bots=2, scope="module")


def execute(c, *args, timeout=180):
    """Runs one Action through client.py; returns its JSON report."""
    out = subprocess.run(
        [reapi_venv() / "bin" / "python", CLIENT, "--url", c.url, "--instance", c.instance, *args],
        capture_output=True, text=True, timeout=timeout,
    )
    assert out.returncode == 0, f"client failed ({out.returncode}): {out.stderr}\n{c.logs()}"
    return json.loads(out.stdout)


def test_action_runs_once_then_comes_from_the_action_cache(cluster):
    before = cluster.executions()
    first = execute(cluster, "--output", "out.txt", "--", "/bin/sh", "-c", "echo hi > out.txt")
    assert first["status"]["code"] == 0, cluster.logs()
    assert first["exit_code"] == 0
    assert first["outputs"] == {"out.txt": "hi\n"}
    assert first["cached_result"] is False
    assert first["worker"] in ("bot1", "bot2")
    assert cluster.executions() == before + 1
    assert cluster.execution_records()[-1] == (first["action"], first["worker"], 0)
    # The operation as REAPI describes it: instance-prefixed name, the stages
    # in ExecuteOperationMetadata, and the Action's digest in each message.
    names = {m["name"] for m in first["messages"]}
    assert len(names) == 1 and names.pop().startswith(f"{cluster.instance}/")
    assert first["messages"][-1]["stage"] == "COMPLETED" and first["messages"][-1]["done"]
    assert {m["metadata_digest"] for m in first["messages"]} == {first["action"]}
    # BuildGrid writes the ActionCache when a lease completes with exit 0.
    assert first["action_cache_exit_code"] == 0

    again = execute(cluster, "--output", "out.txt", "--", "/bin/sh", "-c", "echo hi > out.txt")
    assert again["action"] == first["action"]
    assert again["cached_result"] is True
    assert again["outputs"] == {"out.txt": "hi\n"}
    assert cluster.executions() == before + 1


def test_lost_stream_is_followed_with_wait_execution(cluster):
    report = execute(cluster, "--resume", "--output", "o", "--", "/bin/sh", "-c", "sleep 1; echo resumed > o")
    rpcs = [m["rpc"] for m in report["messages"]]
    assert rpcs[0] == "Execute" and rpcs[-1] == "WaitExecution", report
    assert len({m["name"] for m in report["messages"]}) == 1
    assert report["outputs"] == {"o": "resumed\n"}


def test_failed_command_is_reported_and_not_cached(cluster):
    before = cluster.executions()
    for _ in range(2):
        report = execute(cluster, "--", "/bin/sh", "-c", "echo broken >&2; exit 3")
        assert report["status"]["code"] == 0
        assert report["exit_code"] == 3
        assert report["stderr"] == "broken\n"
        assert report["cached_result"] is False
        assert report["action_cache_exit_code"] is None
    assert cluster.executions() == before + 2


def test_command_that_cannot_start_fails_with_the_bots_message(cluster):
    report = execute(cluster, "--", "no-such-program-here")
    assert report["status"]["code"] == 3  # INVALID_ARGUMENT
    assert report["status"]["message"] == "cannot run 'no-such-program-here': No such file or directory"


def test_killed_bot_lease_runs_on_the_other_bot(cluster):
    before = len(cluster.execution_records())
    client = subprocess.Popen(
        [reapi_venv() / "bin" / "python", CLIENT, "--url", cluster.url, "--instance", cluster.instance,
         "--output", "out.txt", "--", "/bin/sh", "-c", "touch started; sleep 5; echo done > out.txt"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # The command's own marker names the bot that runs it.
        deadline = time.monotonic() + 60
        while not (started := glob.glob(str(cluster.workdir / "bots" / "*" / "scratch" / "*" / "root" / "started"))):
            assert time.monotonic() < deadline and client.poll() is None, cluster.logs()
            time.sleep(0.1)
        victim = Path(started[0]).relative_to(cluster.workdir / "bots").parts[0]
        killed_at = time.monotonic()
        cluster.kill_bot(victim)
        out, err = client.communicate(timeout=120)
        print(f"lease of the killed {victim} completed {time.monotonic() - killed_at:.1f} s after SIGKILL")
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 0, f"{err}\n{cluster.logs()}"
    report = json.loads(out)
    survivor = {"bot1": "bot2", "bot2": "bot1"}[victim]
    assert report["status"]["code"] == 0
    assert report["outputs"] == {"out.txt": "done\n"}
    assert report["worker"] == survivor
    # The killed bot never finished the command, so only the survivor counts it.
    assert cluster.execution_records()[before:] == [(report["action"], survivor, 0)]
    cluster.start_bot(victim)
    assert sorted(cluster.bots()) == ["bot1", "bot2"]


def test_missing_venv_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWC_REAPI_VENV", str(tmp_path / "nowhere"))
    c = BuildGridCluster(tmp_path / "c", bots=1)
    with pytest.raises(ClusterError, match=r"no BuildGrid in .*nowhere \(bin/bgd missing\): run scripts/setup.sh test"):
        c.start()
    c.stop()


def test_stop_leaves_no_process_behind(tmp_path):
    c = BuildGridCluster(tmp_path / "c", bots=1)
    c.start()
    pids = [c._server.pid, c._pg.pid] + [p.pid for p, _ in c._bots.values()]
    c.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    c.stop()  # twice is fine
