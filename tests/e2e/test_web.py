"""flowcd's web front (docs/web-ui.md): the token, the JSON endpoints
checked against docs/api.yaml and against the CLI, the live event stream,
/metrics parsed by prometheus_client's parser and moving with a submit,
the --http flag's bad values, and HTTPS with the TCP front's certificate
and tokens off loopback."""
import json
import re
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import BIN, leaky_cnn, save
from test_front_door import TOKENS, Daemon, pki, tokens_file  # noqa: F401 (pki: a fixture)
from test_progress import zero_strides_model
from webclient import SPEC, Web, check


def cnn(tmp_path, seed=5):
    """A CNN with one generated kernel: its jobs have a codegen task."""
    return save(leaky_cnn(np.random.default_rng(seed)), tmp_path / f"cnn{seed}.onnx")


def metrics(web):
    code, kind, body = web.get("/metrics")
    assert code == 200 and kind.startswith("text/plain"), (code, kind)
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_every_request_needs_the_token(flowc):
    web = Web.of(flowc)
    for path in ["/", "/api/jobs", "/metrics", "/api/events", "/index.html"]:
        code, kind, body = web.get(path, token=False)
        assert code == 401, (path, code)
        check(json.loads(body), "Error")
        assert "flowc status" in json.loads(body)["error"]
    code, _, _ = web.get("/api/jobs?token=" + "0" * len(web.token), token=False)
    assert code == 401
    code, _, _ = web.get("/api/jobs?token=" + web.token, token=False)
    assert code == 200
    # The URL file is the owner's alone.
    mode = (flowc.cache_dir / "flowcd.http").stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)
    assert (flowc.cache_dir / "flowcd.http").read_text().strip() == web.url_with_token


def test_the_endpoints_answer_as_documented_and_as_the_cli_says(flowc, tmp_path):
    web = Web.of(flowc)
    flowc.submit(cnn(tmp_path))
    jobs = web.json("/api/jobs", "JobList")["jobs"]
    assert len(jobs) == 1 and jobs[0]["state"] == "done", jobs
    job = jobs[0]
    assert job["model"].endswith("cnn5.onnx") and job["kernels_total"] > 0
    assert job["kernels_done"] == job["kernels_total"]
    detail = web.json(f"/api/jobs/{job['id']}", "JobDetail")
    assert detail["summary"]["id"] == job["id"] and detail["tasks"]
    assert {t["kind"] for t in detail["tasks"]} >= {"plan", "codegen"}
    phases = [e for e in detail["trace"]["traceEvents"] if e["ph"] == "X"]
    assert phases, detail["trace"]
    explain = flowc.run("explain", job["id"]).stdout
    assert detail["explain"] and detail["explain"].split("\n")[0] in explain

    cache = web.json("/api/cache", "Cache")
    cli = json.loads(flowc.run("cache", "stats", "--json").stdout)
    assert cache["stats"] == cli
    assert cache["history"][-1]["misses"] == cli["misses"]

    workers = web.json("/api/workers", "Workers")
    assert workers["slots"] >= 1 and workers["tasks_run"] >= 1
    assert workers["remote_url"] == ""
    tuning = web.json("/api/tuning", "Tuning")
    assert tuning["records"] == []

    assert web.json("/api/jobs/job-999999", "Error", status=404)["error"]
    assert web.json("/api/jobs/..%2Fetc", "Error", status=404)
    assert web.json("/no-such-page", "Error", status=404)
    # Every path the spec names is served.
    for path in SPEC["paths"]:
        if "{" not in path and path != "/api/events":
            assert web.get(path)[0] == 200, path


def test_a_failed_job_names_the_node(flowc, tmp_path):
    web = Web.of(flowc)
    bad = zero_strides_model(tmp_path / "bad.onnx")
    assert flowc.run("submit", bad, "-o", tmp_path / "bad.fca", check=False).returncode == 3
    jobs = web.json("/api/jobs", "JobList")["jobs"]
    failed = [j for j in jobs if j["state"] == "failed"]
    assert len(failed) == 1, jobs
    assert "conv0" in failed[0]["error"] and "strides" in failed[0]["error"]
    detail = web.json(f"/api/jobs/{failed[0]['id']}", "JobDetail")
    assert "conv0" in detail["error"]


def test_the_event_stream_sends_a_jobs_changes(flowc, tmp_path):
    web = Web.of(flowc)
    stream = web.events()
    seen = []
    done = threading.Event()

    def read():
        for event, data in stream:
            check(data, "JobSummary")
            seen.append((event, data))
            if data["state"] != "running":
                done.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    flowc.submit(cnn(tmp_path, seed=6))
    assert done.wait(60), seen
    states = [data["state"] for _, data in seen]
    assert states[0] == "running" and states[-1] == "done", states
    assert all(event == "job" for event, _ in seen)
    assert max(data["kernels_done"] for _, data in seen) == seen[-1][1]["kernels_total"]


def test_the_event_stream_starts_after_the_lists_change(flowc, tmp_path):
    web = Web.of(flowc)
    flowc.submit(cnn(tmp_path, seed=8))
    listed = web.json("/api/jobs", "JobList")
    assert len(listed["jobs"]) == 1 and listed["change"] > 0
    # From the list's change on, the stream holds only what came after it.
    stream = web.events(path=f"/api/events?since={listed['change']}")
    seen = []
    done = threading.Event()

    def read():
        for event, data in stream:
            seen.append(data)
            if data["state"] == "done":
                done.set()
                return

    threading.Thread(target=read, daemon=True).start()
    flowc.submit(cnn(tmp_path, seed=9))
    assert done.wait(60), seen
    assert {data["id"] for data in seen} == {"job-2"}, seen
    for bad in ["x", "-1", "1e3", "99999999999999999999999"]:
        error = web.json(f"/api/events?since={bad}", "Error", status=400)["error"]
        assert "since" in error and bad in error, error


def test_metrics_parse_and_move_with_a_submit(flowc, tmp_path):
    web = Web.of(flowc)
    before = metrics(web)
    key = ("flowc_jobs_finished_total", (("state", "done"),))
    assert before[key] == 0
    flowc.submit(cnn(tmp_path, seed=7))
    after = metrics(web)
    assert after[key] == 1
    assert after[("flowc_cache_misses_total", (("kind", "artifact"),))] == \
        before.get(("flowc_cache_misses_total", (("kind", "artifact"),)), 0) + 1
    assert after[("flowc_job_duration_seconds_count", (("state", "done"),))] == 1
    assert after[("flowc_cache_stored_bytes", ())] > before[("flowc_cache_stored_bytes", ())]
    assert after[("flowc_tasks_total", (("outcome", "run"),))] > 0
    assert any(name == "flowc_task_duration_seconds_count" for name, _ in after)
    # A hit moves the hit counter, not the miss counter.
    flowc.submit(cnn(tmp_path, seed=7), tmp_path / "again.fca")
    hit = metrics(web)
    assert hit[("flowc_cache_hits_total", (("kind", "artifact"),))] == \
        after.get(("flowc_cache_hits_total", (("kind", "artifact"),)), 0) + 1
    for (name, _), value in hit.items():
        assert name.startswith("flowc_") and value >= 0, name


def flowcd(tmp_path, *args):
    return subprocess.run([str(BIN / "flowcd"), "--cache-dir", str(tmp_path / "c"),
                           "--socket", str(tmp_path / "s.sock"), *args],
                          capture_output=True, text=True, timeout=60)


def test_bad_http_addresses_are_refused(tmp_path):
    for address, words in [("0.0.0.0:8470", "not a loopback"), ("10.1.2.3:80", "not a loopback"),
                           ("127.0.0.1:99999", "PORT 0 to 65535"),
                           ("127.0.0.1:x", "PORT 0 to 65535")]:
        result = flowcd(tmp_path, "--http", address)
        assert result.returncode != 0, address
        assert words in result.stderr and address in result.stderr, result.stderr


def test_http_off_and_a_taken_port(flowc, tmp_path):
    web = Web.of(flowc)
    port = web.base.rsplit(":", 1)[1]
    result = flowcd(tmp_path, "--http", "127.0.0.1:" + port)
    assert result.returncode != 0 and "cannot serve the web UI" in result.stderr, result.stderr
    assert not (tmp_path / "s.sock").exists()


def test_off_loopback_the_web_front_is_tls_with_the_tcp_fronts_tokens(tmp_path, pki):
    """--http on a non-loopback address serves HTTPS with the TCP front's
    certificate, and lets in a request that presents one of its tokens."""
    tokens = tokens_file(tmp_path)
    with Daemon(tmp_path / "d", "--tls-cert", pki / "server.pem", "--tls-key",
                pki / "server.key", "--tokens", tokens, "--http", "0.0.0.0:0") as daemon:
        for _ in range(200):
            found = re.search(r"web UI https://0\.0\.0\.0:(\d+)/", daemon.log.read_text())
            if found:
                break
            time.sleep(0.05)
        assert found, daemon.log.read_text()
        base = f"https://127.0.0.1:{found.group(1)}"
        context = ssl.create_default_context(cafile=str(pki / "ca.pem"))

        def get(path, token=None):
            headers = {"Authorization": "Bearer " + token} if token else {}
            try:
                with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers),
                                            context=context, timeout=30) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        _, read_token = TOKENS["reader"]
        code, body = get("/api/jobs", read_token)
        assert code == 200, body
        check(json.loads(body), "JobList")
        assert get("/api/jobs")[0] == 401
        assert get("/api/jobs", "tok-not-in-the-file")[0] == 401
        assert get("/?token=" + read_token)[0] == 200
        # Plain HTTP on the TLS port gets no page.
        with pytest.raises(Exception):
            urllib.request.urlopen(base.replace("https", "http") + "/api/jobs", timeout=10).read()
