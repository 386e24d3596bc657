"""Latency of flowcd's web front on loopback (docs/web-ui.md): each JSON
endpoint, /metrics and the jobs page, after a few compiles, as the median
and p90 of N sequential GETs with one kept-alive connection; and how long
a job change takes to reach an event-stream client. No peer: the figure is
against the issue's bound (a page in under 200 ms).

    .venv/bin/python bench/web_bench.py [--requests 200] [--jobs 8]
"""
import argparse
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=8)
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
            web = Web.of(flowc)
            print(f"{'path':<16} {'median ms':>10} {'p90 ms':>8} {'bytes':>8}  ({args.jobs} jobs)")
            for path in ["/", "/api/jobs", "/api/jobs/job-1", "/api/cache", "/api/workers",
                         "/api/tuning", "/metrics"]:
                median, p90, size = time_gets(web, path, args.requests)
                print(f"{path:<16} {median:>10.2f} {p90:>8.2f} {size:>8}")
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
