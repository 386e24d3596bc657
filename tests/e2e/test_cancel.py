"""Cancel, detach, timeout and supersede through the real daemon and CLI
(docs/jobs.md), and the trace every compile writes: a cancelled job's
worker and task processes go, its clients end with CANCELLED and a message
naming the job; a superseded job's finished kernels stay in the kernel
cache; the cache is consistent after all of it."""
import json
import os
import pathlib
import signal
import subprocess

from conftest import BIN
from test_isolation import daemon_pid, wait_for, workers_of
from test_tasks import daemon, elementwise_chain, relu_model  # noqa: F401 (fixture)

# One task process and enough distinct kernels that a cold compile lasts
# well past the moments these tests act in.
SLOW_BLOCKS = 48


def submit_process(d, model: pathlib.Path, *flags):
    return subprocess.Popen(
        [str(BIN / "flowc"), "--cache-dir", str(d.flowc.cache_dir), "--socket",
         str(d.flowc.socket), "submit", str(model), "-o", str(model.with_suffix(".fca")),
         "--json", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def job_of(d, model: pathlib.Path, state=None):
    """The newest job of `model` (in `state`, if given)."""
    for job in reversed(d.jobs()):
        if job["model"] == str(model) and (state is None or job["state"] == state):
            return job
    return None


def codegen_started(d, model):
    """The job of `model` once one of its codegen tasks runs or ran."""
    job = job_of(d, model, "running")
    if job and any(t["kind"] == "codegen" and t["state"] in ("running", "done")
                   for t in job["tasks"]):
        return job
    return None


def nothing_runs(d, pid):
    """No job worker, and no task process busy, under daemon `pid`."""
    return not workers_of(pid) and not d.workers()["local"]


def assert_cache_consistent(d):
    report = json.loads(d.flowc.run("cache", "verify", "--json").stdout)
    assert report["ok"], report


def test_flowc_cancel_stops_a_running_job(daemon, tmp_path):
    d = daemon("--workers", "1")
    pid = daemon_pid(d.flowc)
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=SLOW_BLOCKS)
    submit = submit_process(d, model)
    job = wait_for(lambda: codegen_started(d, model), seconds=120)
    assert job, d.jobs()
    # The state, exit 0.
    cancel = d.flowc.run("cancel", job["id"])
    assert cancel.stdout.strip() == f"flowc: job {job['id']} cancelled", cancel.stdout
    # Its client ends CANCELLED, with a message naming the job and who.
    _, err = submit.communicate(timeout=300)
    assert submit.returncode == 1, err
    assert f"job {job['id']} was cancelled by" in err and "(uid " in err, err
    # The job says so; its worker and its running task are gone.
    assert wait_for(lambda: job_of(d, model)["state"] == "cancelled", seconds=60), d.jobs()
    assert wait_for(lambda: nothing_runs(d, pid), seconds=60), (workers_of(pid), d.workers())
    assert "cancelled by" in job_of(d, model)["error"]
    # Cancelling it again says how it ended; JSON too.
    again = json.loads(d.flowc.run("cancel", job["id"], "--json").stdout)
    assert again == {"job_id": job["id"], "state": "cancelled"}
    assert_cache_consistent(d)
    # The same submit afterwards compiles anew, and succeeds.
    out = json.loads(d.flowc.run("submit", relu_model(tmp_path / "r.onnx"), "-o",
                                 tmp_path / "r.fca", "--json").stdout)
    assert out["cache"] == "miss"


def test_cancel_of_an_unknown_job_is_not_found(daemon, tmp_path):
    d = daemon()
    for job in ("job-999", "../../etc/passwd", ""):
        result = d.flowc.run("cancel", job, check=False)
        assert result.returncode == 3, result
        assert f"no job '{job}' among the daemon's queued, running and recent jobs" \
            in result.stderr, result.stderr


def test_a_client_killed_with_sigkill_cancels_its_job(daemon, tmp_path):
    d = daemon("--workers", "1")
    pid = daemon_pid(d.flowc)
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=SLOW_BLOCKS)
    submit = submit_process(d, model)
    assert wait_for(lambda: codegen_started(d, model), seconds=120), d.jobs()
    submit.send_signal(signal.SIGKILL)
    submit.wait(timeout=60)
    # The daemon notices, stops the job and its processes.
    assert wait_for(lambda: job_of(d, model)["state"] == "cancelled", seconds=60), d.jobs()
    assert "its client went away" in job_of(d, model)["error"]
    assert wait_for(lambda: nothing_runs(d, pid), seconds=60), (workers_of(pid), d.workers())
    assert_cache_consistent(d)


def test_timeout_cancels_the_job_saying_so(daemon, tmp_path):
    d = daemon("--workers", "1")
    pid = daemon_pid(d.flowc)
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=SLOW_BLOCKS)
    result = d.flowc.run("submit", model, "-o", tmp_path / "c.fca", "--timeout", "1",
                         check=False)
    assert result.returncode == 1, result
    assert "exceeded --timeout 1 s and was cancelled" in result.stderr, result.stderr
    assert wait_for(lambda: job_of(d, model)["state"] == "cancelled", seconds=60), d.jobs()
    assert "exceeded --timeout 1 s" in job_of(d, model)["error"], d.jobs()
    assert wait_for(lambda: nothing_runs(d, pid), seconds=60), (workers_of(pid), d.workers())
    # A bad limit is refused by the CLI.
    bad = d.flowc.run("submit", model, "--timeout", "-3", check=False)
    assert bad.returncode == 2 and "--timeout" in bad.stderr, bad


def test_a_detached_job_finishes_without_its_client(daemon, tmp_path):
    d = daemon()
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=6)
    out = json.loads(d.flowc.run("submit", model, "--json", "--detach").stdout)
    assert out["detached"] is True and out["job_id"].startswith("job-"), out
    # The client is gone; the job runs on to its end.
    assert wait_for(lambda: job_of(d, model)
                    and job_of(d, model)["state"] == "done", seconds=300), d.jobs()
    assert job_of(d, model)["id"] == out["job_id"]
    hit = json.loads(d.flowc.run("submit", model, "-o", tmp_path / "c.fca",
                                 "--json").stdout)
    assert hit["cache"] == "hit", hit
    # The text form names the job.
    other = elementwise_chain(tmp_path / "other.onnx", blocks=5, last="Tanh")
    text = d.flowc.run("submit", other, "--detach").stdout
    assert text.startswith("flowc: job job-") and text.endswith(" accepted (detached)\n")
    # A detached submit of an uploaded model is refused: the daemon's copy
    # lives only as long as the submit.
    upload = d.flowc.run("submit", other, "--detach", "--upload", check=False)
    assert upload.returncode == 3, upload
    assert "--detach needs a model the daemon reads in place" in upload.stderr, upload


def test_a_newer_submit_supersedes_the_older_and_keeps_its_kernels(daemon, tmp_path):
    d = daemon("--workers", "1")
    model = tmp_path / "model.onnx"
    elementwise_chain(model, blocks=SLOW_BLOCKS)
    first_version = model.read_bytes()
    first = submit_process(d, model)
    older = wait_for(lambda: codegen_started(d, model), seconds=120)
    assert older, d.jobs()
    # A save: another graph at the same path, submitted by the same client.
    relu_model(tmp_path / "relu.onnx")
    os.replace(tmp_path / "relu.onnx", model)
    second = json.loads(d.flowc.run("submit", model, "-o", tmp_path / "second.fca",
                                    "--json").stdout)
    assert second["cache"] == "miss"
    _, err = first.communicate(timeout=300)
    assert first.returncode == 1, err
    assert f"job {older['id']} was superseded by job {second['job_id']}" in err, err
    job = next(j for j in d.jobs() if j["id"] == older["id"])
    assert job["superseded_by"] == second["job_id"], job
    assert wait_for(lambda: next(j for j in d.jobs()
                                 if j["id"] == older["id"])["state"] == "superseded",
                    seconds=300), d.jobs()
    # Its kernels that ran finished; those not started were dropped.
    tasks = next(j for j in d.jobs() if j["id"] == older["id"])["tasks"]
    finished = [t for t in tasks if t["kind"] == "codegen" and t["state"] == "done"]
    assert finished, tasks
    assert all(t["state"] in ("done", "cancelled") for t in tasks), tasks
    assert_cache_consistent(d)
    # The first version again: its finished kernels come from the kernel cache.
    model.write_bytes(first_version)
    again = json.loads(d.flowc.run("submit", model, "-o", tmp_path / "again.fca",
                                   "--json").stdout)
    assert again["kernels_reused"] >= len(finished), again
    assert_cache_consistent(d)


def test_every_compile_writes_a_trace_of_its_phases_passes_and_kernels(daemon, tmp_path):
    d = daemon("--workers", "2")
    model = elementwise_chain(tmp_path / "chain.onnx", blocks=5)
    out = json.loads(d.flowc.run("submit", model, "-o", tmp_path / "c.fca",
                                 "--json").stdout)
    job_id = out["job_id"]
    trace_path = tmp_path / "trace.json"
    d.flowc.run("trace", job_id, "-o", trace_path)
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"]
    for event in events:
        for field in ("ph", "pid", "tid", "name"):
            assert field in event, event
        if event["ph"] == "X":
            assert isinstance(event["ts"], int) and event["dur"] >= 0, event
    # Every task of the job is there, on the lane of the process it ran on.
    job = next(j for j in d.jobs() if j["id"] == job_id)
    kernels = {t["name"] for t in job["tasks"] if t["kind"] == "codegen"}
    assert kernels, job
    spans = {e["name"]: e for e in events if e["ph"] == "X" and e.get("cat") == "codegen"}
    assert kernels <= set(spans), (kernels, set(spans))
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for name in kernels:
        assert lanes[spans[name]["tid"]].startswith("local pid "), lanes
    # The phases in the order the job went through them, end to end.
    phases = [e for e in events if e.get("cat") == "phase"]
    names = [p["name"] for p in phases]
    assert names[0] == "ingest" and "plan" in names and "link" in names, names
    assert names.index("plan") < names.index("link")
    assert phases[-1]["ts"] + phases[-1]["dur"] >= max(
        s["ts"] + s["dur"] for s in spans.values()), (phases[-1], spans)
    for before, after in zip(phases, phases[1:]):
        assert before["ts"] + before["dur"] == after["ts"], (before, after)
    # Written to the cache directory too, so it outlives the daemon's memory.
    stored = json.loads((d.flowc.cache_dir / "traces" / f"{job_id}.json").read_text())
    assert stored["otherData"]["job_id"] == job_id
    stdout = json.loads(d.flowc.run("trace", job_id).stdout)
    assert stdout["otherData"]["job_id"] == job_id
    missing = d.flowc.run("trace", "job-4242", check=False)
    assert missing.returncode == 3 and "no trace of job 'job-4242'" in missing.stderr, missing
