"""Remote cache throughput: uploads and downloads of a 256 MiB and a 1 GiB
blob through flowc's remote cache client (build/bin/remote_cache_probe)
against nginx (Bazel HTTP cache over WebDAV) and BuildGrid 0.9.1 (REAPI
ByteStream), next to the loopback limit measured in the same run (an iperf-style TCP
sender and receiver in this process over 127.0.0.1) and, for nginx, the
curl CLI moving the same blob (the peer figure).

    /work/main/.venv/bin/python bench/remote_cache_bench.py [--sizes-mib 256,1024]

Each transfer is one probe process (its start and one GetCapabilities are
in the time, a few ms). The client hashes (SHA-256) everything it sends
and receives; the servers write to their disk (page cache). Prints MB/s
(10^6 bytes) and the ratio to loopback.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "remotecache"))
from hostinfo import cpu_line  # noqa: E402
from probe import client_for, digest_of_file  # noqa: E402
from servers import BuildGridCache, NginxCache  # noqa: E402

MiB = 1 << 20
CHUNK = MiB


def loopback_mbps(total_bytes):
    """Bytes/s of one TCP stream over 127.0.0.1, sender and receiver in this
    process (send/recv release the GIL), 1 MiB buffers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = [0]

    def receive():
        conn, _ = server.accept()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            n = conn.recv_into(view)
            if n == 0:
                break
            received[0] += n
        conn.close()

    thread = threading.Thread(target=receive)
    thread.start()
    payload = memoryview(os.urandom(CHUNK))
    sender = socket.create_connection(server.getsockname())
    start = time.perf_counter()
    sent = 0
    while sent < total_bytes:
        sender.sendall(payload)
        sent += CHUNK
    sender.shutdown(socket.SHUT_WR)
    thread.join()
    elapsed = time.perf_counter() - start
    sender.close()
    server.close()
    assert received[0] == sent
    return sent / elapsed / 1e6


def make_blob(path, size, seed):
    """A file of `size` bytes that compresses poorly and differs per seed."""
    block = os.urandom(CHUNK - seed % 7)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
    return path


def timed(client, *args):
    start = time.perf_counter()
    result = client.run(*args)
    elapsed = time.perf_counter() - start
    if result.rc != 0:
        raise SystemExit(f"remote_cache_probe {' '.join(map(str, args))} failed: {result}")
    return elapsed, result.json


def curl_mbps(url, path, size, out):
    """The peer: Debian's curl CLI moving the same blob through the same nginx
    (no hashing), as (upload, download) MB/s."""
    target = f"{url}/cas/curl-{path.name}"
    start = time.perf_counter()
    subprocess.run(["curl", "-sSf", "-T", path, target], check=True)
    up = size / (time.perf_counter() - start) / 1e6
    start = time.perf_counter()
    subprocess.run(["curl", "-sSf", "-o", out, target], check=True)
    down = size / (time.perf_counter() - start) / 1e6
    out.unlink()
    return up, down


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="256,1024")
    args = parser.parse_args()
    sizes = [int(s) * MiB for s in args.sizes_mib.split(",")]

    print(cpu_line())
    loop = max(loopback_mbps(max(sizes)) for _ in range(3))
    print(f"loopback TCP (one stream, in-process, best of 3): {loop:8.0f} MB/s")
    print(f"{'server':<10} {'blob':>8} {'upload MB/s':>12} {'x loop':>7} {'download MB/s':>14} "
          f"{'x loop':>7} {'peak RSS MiB':>13}")
    with tempfile.TemporaryDirectory(prefix="flowc-rcbench-") as tmp:
        tmp = Path(tmp)
        blobs = {}
        for i, size in enumerate(sizes):
            path = make_blob(tmp / f"blob{size // MiB}", size, seed=i)
            blobs[size] = (path, digest_of_file(path))
        for kind, cls in (("nginx", NginxCache), ("buildgrid", BuildGridCache)):
            server = cls(tmp / kind).start()
            try:
                client = client_for(server)
                for size in sizes:
                    path, digest = blobs[size]
                    up_s, up = timed(client, "put-file", digest, path)
                    out = tmp / "download"
                    down_s, down = timed(client, "get-file", digest, out)
                    out.unlink()
                    up_mbps, down_mbps = size / up_s / 1e6, size / down_s / 1e6
                    rss = max(up["peak_rss_kb"], down["peak_rss_kb"]) / 1024
                    print(f"{kind:<10} {size // MiB:>5} MiB {up_mbps:>12.0f} {up_mbps / loop:>7.2f} "
                          f"{down_mbps:>14.0f} {down_mbps / loop:>7.2f} {rss:>13.1f}", flush=True)
                    if kind == "nginx":
                        up_mbps, down_mbps = curl_mbps(server.url, path, size, tmp / "download")
                        print(f"{'curl CLI':<10} {size // MiB:>5} MiB {up_mbps:>12.0f} "
                              f"{up_mbps / loop:>7.2f} {down_mbps:>14.0f} {down_mbps / loop:>7.2f}"
                              f" {'-':>13}", flush=True)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
