#!/usr/bin/env python3
"""Another machine's compile miss over a slow link: the tuning records one
machine's search published reach another machine's compile through the
remote tier, and that compile's link asks the tier for its packed weights,
several lookups in flight at once. Prints figures; asserts only that the
records arrived.

    .venv/bin/python bench/remote_records_bench.py [--models resnet50]
        [--rtt-ms 0,20,50] [--budget 60] [--workdir DIR]

Per model: nginx as a Bazel HTTP cache (tests/remotecache/servers.py) on
loopback. Daemon A (empty cache) compiles with `--search-budget BUDGET` and
publishes each kernel's records. For each --rtt-ms, daemon B (an empty cache
of its own, another machine of the farm, read-only so that each finds the
tier as A left it) reaches nginx through a proxy here that holds each chunk
for half the round trip in each direction, and compiles the same
architecture with other weights (seed 1: the artifact misses, the kernels
and their signatures are the same) without a budget: it measures nothing,
and its records come from the tier. Printed: B's compile wall time, its
remote lookups (hits + misses: the records hit; its own weights' packed
forms miss), and what those lookups would cost one after another (lookups x
RTT, a floor: each is a round trip or more), beside the compile at the first
RTT.
"""
import argparse
import asyncio
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "remotecache"))
from hostinfo import cpu_line  # noqa: E402
from remote_cache_hit_bench import remote_status  # noqa: E402
from task_bench import Daemon  # noqa: E402
import servers  # noqa: E402


class SlowLink:
    """A TCP proxy on loopback that holds every chunk for `one_way_s`
    before passing it on, in both directions: a link with that much
    latency each way (2 x one_way_s per round trip)."""

    def __init__(self, upstream_port, one_way_s):
        self.upstream_port = upstream_port
        self.one_way_s = one_way_s
        self.loop = asyncio.new_event_loop()
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        self.port = listening.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, args=(listening,), daemon=True)
        self.thread.start()

    def _serve(self, listening):
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(
            asyncio.start_server(self._connection, sock=listening))
        self.loop.run_forever()

    async def _pump(self, reader, writer):
        # Chunks keep their order and each waits its own latency: a queue
        # of (due time, bytes).
        queue = asyncio.Queue()

        async def send():
            while (item := await queue.get()) is not None:
                due, data = item
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while data := await reader.read(1 << 16):
                queue.put_nowait((time.monotonic() + self.one_way_s, data))
        except ConnectionError:
            pass
        queue.put_nowait(None)
        await sender

    async def _connection(self, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1",
                                                                 self.upstream_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer),
                             return_exceptions=True)

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)


def export(name, workdir, seed):
    out = workdir / f"seed{seed}"
    path = out / f"{name}.onnx"
    if not path.exists():
        subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
                        str(out), "--models", name, "--seed", str(seed)],
                       check=True, capture_output=True, text=True, timeout=1800)
    return path


def bench(name, workdir, rtts_ms, budget):
    where = pathlib.Path(tempfile.mkdtemp(dir=workdir, prefix=f"{name}-records-"))
    server = servers.NginxCache(where / "nginx").start()
    a = None
    try:
        a = Daemon(where / "a", "--remote-cache", server.url)
        seconds, compiled = a.submit(export(name, workdir, 0), where / "a.fca",
                                     "--search-budget", str(budget))
        search = compiled["search"]
        print(f"{name}: A searched {search['measured_kernels']} of "
              f"{search['tunable_kernels']} kernels in {seconds:.1f} s and published "
              f"their records", flush=True)
        other = export(name, workdir, 1)
        path = urllib.parse.urlsplit(server.url).path
        baseline = None
        for rtt in rtts_ms:
            link = SlowLink(server.port, rtt / 2000)
            # Read-only: each B finds the tier as A left it.
            b = Daemon(where / f"b{rtt}", "--remote-cache",
                       f"http://127.0.0.1:{link.port}{path}", "--remote-read-only")
            try:
                seconds, result = b.submit(other, where / f"b{rtt}.fca")
                status = remote_status(b)
            finally:
                b.stop()
                link.stop()
            assert result["cache"] == "miss", result
            tuned = result["search"]["tuned_kernels"]
            assert tuned >= search["measured_kernels"] > 0, result["search"]
            lookups = status["hits"] + status["misses"]
            baseline = baseline if baseline is not None else seconds
            serial = lookups * rtt / 1000
            print(f"{name}: B at RTT {rtt:3d} ms: compile {seconds:6.2f} s "
                  f"(+{seconds - baseline:5.2f} s over RTT {rtts_ms[0]} ms), "
                  f"{tuned} kernels tuned by A's records, {lookups} remote lookups "
                  f"({status['hits']} hits), one after another >= {serial:5.2f} s",
                  flush=True)
    finally:
        if a:
            a.stop()
        server.stop()
        shutil.rmtree(where, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--rtt-ms", default="0,20,50")
    parser.add_argument("--budget", type=float, default=60)
    parser.add_argument("--workdir", type=pathlib.Path,
                        default=pathlib.Path(tempfile.gettempdir()) / "flowc-records-bench")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(cpu_line())
    rtts = [int(rtt) for rtt in args.rtt_ms.split(",")]
    for name in args.models.split(","):
        bench(name, args.workdir, rtts, args.budget)


if __name__ == "__main__":
    main()
