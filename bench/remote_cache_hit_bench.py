#!/usr/bin/env python3
"""Remote hit vs local hit vs cold compile, per model and per remote cache
server, in the same run: nginx as a Bazel HTTP cache (WebDAV) and BuildGrid
0.9.1 (CAS + ActionCache + ByteStream), both on loopback, started by
tests/remotecache/servers.py. Prints figures; asserts nothing.

    .venv/bin/python bench/remote_cache_hit_bench.py [--models resnet50,bert]
        [--servers nginx,buildgrid] [--workdir DIR] [--hits 5]

Per model and server: daemon A (empty cache) compiles cold and uploads;
its local hit is timed (a new `flowc submit` process each time, median of
--hits); daemon B, with an empty cache of its own (another machine of the
farm), submits the same model: a remote hit (0 kernels compiled), timed,
with the bytes it downloaded; then B's next submit is a local hit. Models
are exported once into WORKDIR (torchvision's with Debian's torch, BERT
with .venv-export) and kept there.
"""
import argparse
import json
import pathlib
import shutil
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "remotecache"))
from hostinfo import cpu_line  # noqa: E402
from task_bench import Daemon, export, flowc  # noqa: E402
import servers  # noqa: E402


def remote_status(daemon):
    return json.loads(flowc(daemon.cache, daemon.socket, "status", "--json").stdout)[
        "remote_cache"]


def median_submit(daemon, model, out, runs):
    times = []
    for _ in range(runs):
        seconds, result = daemon.submit(model, out)
        times.append(seconds)
    return statistics.median(times), result


def bench(name, model, server_kind, workdir, hits):
    where = pathlib.Path(tempfile.mkdtemp(dir=workdir, prefix=f"{name}-{server_kind}-"))
    server = servers.start(server_kind, where / "server")
    flags = ["--remote-cache", server.url]
    if server.instance:
        flags += ["--remote-instance", server.instance]
    a = b = None
    try:
        a = Daemon(where / "a", *flags)
        cold, compiled = a.submit(model, where / "a.fca")
        uploaded = remote_status(a)
        local_hit, hit = median_submit(a, model, where / "a2.fca", hits)
        assert hit["cache"] == "hit", hit

        b = Daemon(where / "b", *flags)
        remote_hit, fetched = b.submit(model, where / "b.fca")
        downloaded = remote_status(b)
        assert fetched["answered_by"] == "remote" and fetched["kernels_compiled"] == 0, fetched
        assert fetched["artifact_digest"] == compiled["artifact_digest"]
        b_local, b_hit = median_submit(b, model, where / "b2.fca", hits)
        assert b_hit["answered_by"] == "local", b_hit
        print(f"{name:10s} {server_kind:9s} cold {cold:7.2f} s "
              f"({compiled['kernels_compiled']} kernels; uploaded {uploaded['uploads']} "
              f"entries, {uploaded['bytes_uploaded'] / 2**20:.1f} MiB) | "
              f"remote hit {remote_hit:6.3f} s ({downloaded['bytes_downloaded'] / 2**20:.1f} "
              f"MiB down; {cold / remote_hit:.1f}x faster than cold) | "
              f"local hit {local_hit * 1e3:6.1f} ms (A), {b_local * 1e3:6.1f} ms (B after "
              f"its remote hit)", flush=True)
    finally:
        for d in (a, b):
            if d:
                d.stop()
        server.stop()
        shutil.rmtree(where, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,bert")
    parser.add_argument("--servers", default="nginx,buildgrid")
    parser.add_argument("--workdir", type=pathlib.Path,
                        default=pathlib.Path(tempfile.gettempdir()) / "flowc-remote-bench")
    parser.add_argument("--hits", type=int, default=5)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(cpu_line())
    for name in args.models.split(","):
        model = export(name, args.workdir)
        for server_kind in args.servers.split(","):
            bench(name, model, server_kind, args.workdir, args.hits)


if __name__ == "__main__":
    main()
