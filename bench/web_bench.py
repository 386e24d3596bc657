"""Latency of flowcd's web front on loopback (docs/web-ui.md): each JSON
endpoint, /metrics and the jobs page, after a few compiles, as the median
and p90 of N sequential GETs with one kept-alive connection; and how long
a job change takes to reach an event-stream client; with --history N, the
same with N more jobs in the daemon's history (submits of a cached model);
and the model page's endpoints for a BERT-shaped encoder of 12 layers (its
view, and its drawing through Graphviz's dot, first and cached). No peer:
the figure is against the issue's bound (a page in under 200 ms).

    .venv/bin/python bench/web_bench.py [--requests 200] [--jobs 8] [--history 1000]
"""
import argparse
import re
import http.client
import pathlib
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "examples"), str(ROOT / "bench")]

import hostinfo  # noqa: E402
import make_models  # noqa: E402
from conftest import Flowc, save  # noqa: E402
from webclient import Web  # noqa: E402


def time_gets(web, path, count):
    host, port = web.base.split("//")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": "Bearer " + web.token}
    times = []
    for _ in range(count):
        start = time.perf_counter()
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        times.append((time.perf_counter() - start) * 1e3)
        assert response.status == 200, (path, response.status)
    connection.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1], len(body)


def page_loads(web, jobs, digest):
    """In headless Chromium (where installed): from navigation to the page
    drawn (every job's row; the model page's graph), median of 5 loads."""
    try:
        from test_web_browser import BROWSER, DRIVER, make_browser
    except ImportError as e:
        print(f"page loads: not measured ({e})")
        return
    if not BROWSER.exists() or not DRIVER.exists():
        print("page loads: not measured (no chromium / chromium-driver)")
        return
    browser = make_browser()
    try:
        browser.get(web.url_with_token)
        for page, selector, count in [("/", "#jobs tr[data-job]", jobs),
                                      (f"/model.html?digest={digest}", "#graph svg g.node", 1),
                                      ("/cache.html", "#models tbody tr", 1)]:
            times = []
            for _ in range(5):
                browser.get(web.base + page)
                times.append(browser.execute_async_script(
                    "const [selector, count, done] = arguments;"
                    "const tick = () => document.querySelectorAll(selector).length >= count"
                    " ? done(performance.now()) : setTimeout(tick, 1);"
                    "tick();", selector, count))
            print(f"page {page.split('?')[0]:<12} drawn in {statistics.median(times):.1f} ms "
                  f"(median of 5, navigation to {count} x '{selector}')")
    finally:
        browser.quit()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--history", type=int, default=0,
                        help="cached submits added to the history before timing")
    args = parser.parse_args()
    print(hostinfo.cpu_line())
    with tempfile.TemporaryDirectory() as directory:
        tmp = pathlib.Path(directory)
        flowc = Flowc(tmp)
        flowc.run("daemon", "start")
        try:
            for seed in range(args.jobs):
                model = save(make_models.make_cnn(np.random.default_rng(seed)),
                             tmp / f"m{seed}.onnx")
                flowc.submit(model)
            encoder = save(make_models.make_encoder(np.random.default_rng(1)),
                           tmp / "encoder.onnx")
            digest = flowc.submit(encoder)["model_digest"]
            for i in range(args.history):
                flowc.submit(model, tmp / "again.fca")
            web = Web.of(flowc)
            jobs = len(web.json("/api/jobs")["jobs"])
            # The drawing's first request runs dot; later ones are served
            # from the daemon's memory.
            start = time.perf_counter()
            code, _, svg = web.get(f"/api/models/{digest}/graph.svg")
            assert code == 200, (code, svg[:200])
            first_drawing = (time.perf_counter() - start) * 1e3
            print(f"{'path':<16} {'median ms':>10} {'p90 ms':>8} {'bytes':>8}  ({jobs} jobs)")
            newest = web.json("/api/jobs")["jobs"][-1]["id"]
            for path in ["/", "/api/jobs", f"/api/jobs/{newest}", "/api/cache", "/api/workers",
                         "/api/tuning", "/metrics", "/api/models", "/model.html",
                         f"/api/models/{digest}", f"/api/models/{digest}/graph.svg"]:
                median, p90, size = time_gets(web, path, args.requests)
                label = path.replace(digest, "D")
                print(f"{label:<16} {median:>10.2f} {p90:>8.2f} {size:>8}")
            boxes = len(re.findall(rb'class="node"', svg))
            nodes = len(web.json(f"/api/models/{digest}")["nodes"])
            print(f"the encoder's drawing ({boxes} boxes of {nodes} nodes): first request "
                  f"(runs dot) {first_drawing:.1f} ms")
            page_loads(web, jobs, digest)
            # A change's way to a stream client: submit, time the first event.
            stream = web.events()
            first = threading.Event()
            arrived = []

            def read():
                # The stream opens with every kept job; wait for the new one.
                for _, job in stream:
                    if job["model"].endswith("late.onnx"):
                        arrived.append(time.perf_counter())
                        first.set()
                        return

            threading.Thread(target=read, daemon=True).start()
            time.sleep(0.5)
            start = time.perf_counter()
            submit = threading.Thread(target=flowc.submit, args=(
                save(make_models.make_cnn(np.random.default_rng(99)), tmp / "late.onnx"),))
            submit.start()
            first.wait(30)
            submit.join()
            print(f"event stream: first event {1e3 * (arrived[0] - start):.1f} ms after the "
                  "submit began (includes the CLI's start and the job's acceptance)")
        finally:
            flowc.run("daemon", "stop", check=False)


if __name__ == "__main__":
    main()
