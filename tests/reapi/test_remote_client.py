"""flowc's REAPI client (remote/, driven by build/bin/remote_probe) against a
real engine: BuildGrid 0.9.1 on PostgreSQL with two bots
(tests/reapi/cluster.py). Executes, action-cache hits, ByteStream both ways,
engine errors, corrupted outputs, cancellation and an engine that is down.

  /work/main/.venv/bin/python -m pytest -q tests/reapi/test_remote_client.py
"""

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import cluster_fixture  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "build" / "bin" / "remote_probe"

cluster = cluster_fixture(bots=2, scope="module")


def probe(url, instance, *args, timeout=240):
    """Runs remote_probe; returns (exit status, parsed stdout or None, stderr)."""
    if not PROBE.exists():
        pytest.fail(f"{PROBE} missing: bash scripts/build.sh remote_probe")
    out = subprocess.run([PROBE, url, "--instance", instance, *args], capture_output=True,
                         text=True, timeout=timeout)
    parsed = json.loads(out.stdout) if out.stdout.strip() else None
    return out.returncode, parsed, out.stderr


def execute(c, tmp_path, spec, *args):
    """Runs one action (or a list) on the cluster; returns the probe's report."""
    path = tmp_path / f"spec-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(spec))
    rc, report, stderr = probe(c.url, c.instance, *args, "execute", str(path))
    assert report is not None, f"exit {rc}: {stderr}\n{c.logs()}"
    return rc, report


def running(text):
    """Whether a process whose command line holds `text` runs."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


def execute_while_running(c, tmp_path, spec, command_text, *args):
    """Starts execute() on a thread and returns once a bot runs the command
    (a process whose command line holds `command_text`); the returned
    function joins the thread and gives execute()'s result."""
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(report=execute(c, tmp_path, spec, *args)))
    thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not running(command_text):
        time.sleep(0.2)

    def finish():
        thread.join(timeout=240)
        assert "report" in result, f"execute() did not return\n{c.logs()}"
        return result["report"]

    return finish


def shell(script, **extra):
    return {"arguments": ["/bin/sh", "-c", script], **extra}


def test_capabilities(cluster):
    # BuildGrid takes SHA256 and executes.
    rc, report, stderr = probe(cluster.url, cluster.instance, "capabilities")
    assert rc == 0 and report == {"ok": True, "error": None}, stderr


def test_executed_once_then_answered_by_the_action_cache(cluster, tmp_path):
    # A unique action, so earlier runs of the suite cannot have cached it.
    marker = f"{time.time_ns()}"
    spec = shell("cat in/data.txt > out/copy.txt; echo ran",
                 inputs=[{"path": "in/data.txt", "text": f"payload {marker}\n"}],
                 outputs=["out/copy.txt"], out_dir=str(tmp_path / "first"))
    before = cluster.executions()
    rc, first = execute(cluster, tmp_path, spec)
    assert rc == 0, first
    outcome = first["outcomes"][0]
    assert outcome["exit_code"] == 0 and outcome["cached"] is False
    assert outcome["stdout"] == "ran\n"
    assert outcome["worker"] in ("bot1", "bot2")
    assert (tmp_path / "first" / "out" / "copy.txt").read_text() == f"payload {marker}\n"
    assert [o["path"] for o in outcome["outputs"]] == ["out/copy.txt"]
    assert first["counters"]["executed"] == 1 and first["counters"]["cache_hits"] == 0
    # Action, Command, two directories and the input: all new to the CAS.
    assert first["counters"]["blobs_uploaded"] == 5
    assert cluster.executions() == before + 1
    assert cluster.execution_records()[-1][0] == outcome["action_digest"].split(":")[1]

    # A second client (a fresh process): the action cache answers, no bot runs.
    spec["out_dir"] = str(tmp_path / "second")
    rc, again = execute(cluster, tmp_path, spec)
    assert rc == 0, again
    hit = again["outcomes"][0]
    assert hit["cached"] is True and hit["action_digest"] == outcome["action_digest"]
    assert hit["stdout"] == "ran\n"
    assert (tmp_path / "second" / "out" / "copy.txt").read_text() == f"payload {marker}\n"
    assert again["counters"]["cache_hits"] == 1 and again["counters"]["executed"] == 0
    assert again["counters"]["blobs_uploaded"] == 0
    assert cluster.executions() == before + 1


def test_large_input_and_output_travel_by_bytestream(cluster, tmp_path):
    # A 5 MiB input and a 10 MiB output: neither fits BuildGrid's 4 MiB
    # batches, so they can only have gone through ByteStream Write and Read.
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(5 << 20))
    spec = shell("cat big.bin big.bin > twice.bin",
                 inputs=[{"path": "big.bin", "file": str(big)}], outputs=["twice.bin"],
                 out_dir=str(tmp_path / "out"))
    rc, report = execute(cluster, tmp_path, spec)
    assert rc == 0, report
    outcome = report["outcomes"][0]
    assert outcome["exit_code"] == 0, outcome
    expected = big.read_bytes() * 2
    assert (tmp_path / "out" / "twice.bin").read_bytes() == expected
    assert outcome["outputs"][0]["digest"] == \
        f"sha256:{hashlib.sha256(expected).hexdigest()}/{len(expected)}"
    assert report["counters"]["bytes_uploaded"] >= 5 << 20
    assert report["counters"]["bytes_downloaded"] >= 10 << 20


def test_non_zero_exit_is_a_result_not_an_error(cluster, tmp_path):
    rc, report = execute(cluster, tmp_path, shell(f"echo broken {time.time_ns()} >&2; exit 3"))
    assert rc == 0, report
    outcome = report["outcomes"][0]
    assert outcome["exit_code"] == 3
    assert outcome["stderr"].startswith("broken ")


def test_engine_timeout_fails_with_the_engines_message(cluster, tmp_path):
    # The bot kills the command after the Action's timeout; the engine
    # reports DEADLINE_EXCEEDED in ExecuteResponse.status.
    rc, report = execute(cluster, tmp_path, shell(f"sleep 30 # {time.time_ns()}", timeout=1))
    assert rc == 1
    error = report["outcomes"][0]["error"]
    assert error["code"] == "ResourceExhausted", error
    assert f"on {cluster.url} (instance '{cluster.instance}'): DEADLINE_EXCEEDED" in error["message"]
    assert "timed out after 1 s" in error["message"]


def test_platform_no_worker_offers_is_refused_by_the_engine(cluster, tmp_path):
    rc, report = execute(cluster, tmp_path, shell("true", platform=[["gpu", "h100"]]))
    assert rc == 1
    error = report["outcomes"][0]["error"]
    assert f"on {cluster.url} (instance '{cluster.instance}')" in error["message"], error
    assert error["code"] in ("InvalidArgument", "FailedPrecondition"), error


def test_concurrent_actions_through_one_executor(cluster, tmp_path):
    # Six distinct actions on six threads of one executor.
    marker = time.time_ns()
    specs = [shell(f"echo {i} {marker} > o.txt", outputs=["o.txt"],
                   out_dir=str(tmp_path / f"out{i}")) for i in range(6)]
    rc, report = execute(cluster, tmp_path, specs)
    assert rc == 0, report
    for i, outcome in enumerate(report["outcomes"]):
        assert outcome["exit_code"] == 0, outcome
        assert (tmp_path / f"out{i}" / "o.txt").read_text() == f"{i} {marker}\n"
    assert report["counters"]["executed"] == 6


def test_corrupted_output_in_the_engines_cas_is_refused(cluster, tmp_path):
    # Run an action, then flip bytes of its output's file in BuildGrid's
    # disk CAS (same size): the action-cache hit that follows must be refused.
    marker = f"{time.time_ns()}".encode()
    content = b"output " + marker + b"\n"
    spec = shell("printf '%s\\n' \"output $M\" > o.txt", environment=[["M", marker.decode()]],
                 outputs=["o.txt"])
    rc, report = execute(cluster, tmp_path, spec)
    assert rc == 0 and report["outcomes"][0]["exit_code"] == 0, report
    digest = hashlib.sha256(content).hexdigest()
    assert report["outcomes"][0]["outputs"][0]["digest"] == f"sha256:{digest}/{len(content)}"
    stored = list((cluster.workdir / "cas").rglob(digest[2:]))
    assert len(stored) == 1, f"{digest} not found once under {cluster.workdir / 'cas'}: {stored}"
    stored[0].write_bytes(content.upper())

    rc, report = execute(cluster, tmp_path, spec)
    assert rc == 1, report
    error = report["outcomes"][0]["error"]
    assert error["code"] == "DataLoss", error
    assert f"blob sha256:{digest}/{len(content)} from {cluster.url}" in error["message"]
    assert "its bytes hash to sha256:" + hashlib.sha256(content.upper()).hexdigest() in \
        error["message"]


def test_cancelled_call_is_abandoned(cluster, tmp_path):
    # The flag rises 1 s into a 20 s action: the call returns Cancelled.
    rc, report = execute(cluster, tmp_path, shell(f"sleep 20 # {time.time_ns()}"),
                         "--cancel-after-ms", "1000")
    assert rc == 1
    error = report["outcomes"][0]["error"]
    assert error["code"] == "Cancelled", error
    assert f"on {cluster.url} (instance '{cluster.instance}'): cancelled" in error["message"]


def test_lost_stream_is_resumed_across_an_engine_restart(cluster, tmp_path):
    # BuildGrid restarts while the action runs: the Execute stream breaks,
    # and WaitExecution on the same operation (kept in PostgreSQL) brings
    # the result.
    spec = shell(f"sleep 6; echo survived > o.txt # {time.time_ns()}", outputs=["o.txt"],
                 out_dir=str(tmp_path / "out"))
    finish = execute_while_running(cluster, tmp_path, spec, "sleep 6; echo survived")
    cluster.stop_server()
    cluster.start_server()
    rc, report = finish()
    assert rc == 0, f"{report}\n{cluster.logs()}"
    assert report["outcomes"][0]["exit_code"] == 0, report
    assert (tmp_path / "out" / "o.txt").read_text() == "survived\n"
    assert report["counters"]["streams_resumed"] >= 1


def test_engine_down_is_unavailable_naming_it(cluster, tmp_path):
    # A port nothing listens on, and the cluster's own engine stopped.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"grpc://127.0.0.1:{port}"
    rc, report, stderr = probe(url, "main", "capabilities", timeout=60)
    assert rc == 1
    assert report["error"]["code"] == "Unavailable"
    assert f"GetCapabilities on {url} (instance 'main'): UNAVAILABLE" in report["error"]["message"]

    cluster.stop_server()
    try:
        rc, report = execute(cluster, tmp_path, shell("true"))
        assert rc == 1
        error = report["outcomes"][0]["error"]
        assert error["code"] == "Unavailable", error
        assert f"on {cluster.url} (instance '{cluster.instance}'): UNAVAILABLE" in error["message"]
    finally:
        cluster.start_server()


def test_engine_gone_mid_action_fails_after_the_resume_window(cluster, tmp_path):
    # The engine goes down while the action runs and stays down: the lost
    # stream is retried for the 2 s window, then the call is Unavailable.
    spec = shell(f"sleep 8; echo late > o.txt # {time.time_ns()}", outputs=["o.txt"])
    finish = execute_while_running(cluster, tmp_path, spec, "sleep 8; echo late",
                                   "--resume-window-s", "2")
    cluster.stop_server()
    try:
        rc, report = finish()
        assert rc == 1, report
        error = report["outcomes"][0]["error"]
        assert error["code"] == "Unavailable", error
        assert error["message"].startswith("WaitExecution main/"), error
        assert f"on {cluster.url} (instance '{cluster.instance}'): UNAVAILABLE" in error["message"]
    finally:
        cluster.start_server()
