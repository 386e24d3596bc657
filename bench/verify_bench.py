#!/usr/bin/env python3
"""Cost of artifact verification at open: `flowc run ARTIFACT` with its
default digest checks against `flowc run --no-verify` (bounds only), on
ResNet-50 and a synthetic model with 2 GiB of weights, packed and thin.
Peer: `sha256sum` over the same file, same run. Prints figures; asserts
nothing.

    .venv/bin/python bench/verify_bench.py [--models resnet50,big2g] [--runs 7]
                                           [--dir WORKDIR] [--keep]

Per model, on its own daemon and fresh cache: `flowc submit` (packed) and
`flowc submit --thin`; then, alternating, --runs fresh `flowc run` processes
with and without --no-verify on a warm page cache (the file is read once
first). The figures are `open_ms` (open alone: mapping, bounds, digests)
and `first_run_ms` (open, session, first run) of `run --json`, medians of
the runs; verification's cost is the difference of the two open medians,
and its speed the verified bytes (the artifact's sections, plus a thin
artifact's external weights) over that difference. Hashing faults the
mapped pages in, which the first run would do otherwise: the first-run
difference says what a user waits for in all. `sha256sum FILE`
(coreutils, one core, no SHA-NI) and `openssl dgst -sha256` (one core,
SHA-NI where the CPU has it) are timed on the packed file, medians of 3.
CPU seconds (the processes' user + system time) are printed too: unlike
wall time they do not grow when other work shares the cores, so GB per
CPU-second compares flowc's hashing with the peers' on a busy machine.

Models: `resnet50` (/usr/bin/python3 examples/export_torchvision.py) and
`big2g` (8 MatMul + Add layers of 8192 x 8192 float32, 2 GiB of external
data, bench/ingest_bench.py's writer; the packed artifact carries the
weights and their oneDNN-packed copies: put --dir where >12 GB are free).
"""
import argparse
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "examples"))

from hit_bench import BIN, Daemon, cpu_line, version_of  # noqa: E402

GIB = 1 << 30


def make_model(name, models_dir):
    out = models_dir / name
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.onnx"
    if (out / "done").exists() and path.exists():
        return path
    if name == "resnet50":
        subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
                        str(out), "--models", "resnet50"], check=True, capture_output=True)
    elif name == "big2g":
        import ingest_bench
        ingest_bench.write_external_model(path, 2 * GIB, files=1)
    else:
        raise SystemExit(f"unknown model '{name}' (known: resnet50, big2g)")
    (out / "done").write_text("")
    return path


def input_file(daemon, artifact, work):
    """An .npy of the artifact's only input (random, its shape and dtype)."""
    described = json.loads(daemon.run("inspect", artifact, "--json").stdout)
    spec = described["inputs"][0]
    x = np.random.default_rng(0).standard_normal(spec["shape"]).astype(spec["dtype"])
    path = work / "x.npy"
    np.save(path, x)
    return path


def children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timings(daemon, artifact, x, *flags):
    """(open_ms, first_run_ms, CPU seconds) of one fresh `flowc run`."""
    before = children_cpu_s()
    result = daemon.run("run", artifact, "--input", x, "--json", "--print", "1", *flags)
    cpu = children_cpu_s() - before
    report = json.loads(result.stdout)
    return report["open_ms"], report["first_run_ms"], cpu


def timed_median(cmd, runs=3):
    """Median (wall seconds, CPU seconds) of `runs` runs of `cmd`."""
    walls, cpus = [], []
    for _ in range(runs):
        start, before = time.perf_counter(), children_cpu_s()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - start)
        cpus.append(children_cpu_s() - before)
    return statistics.median(walls), statistics.median(cpus)


def verified_bytes(daemon, artifact):
    """The artifact's size plus its external weights (a thin one's)."""
    described = json.loads(daemon.run("inspect", artifact, "--json").stdout)
    return described["bytes"] + described.get("external_weight_bytes", 0)


def bench(name, models_dir, work, runs):
    model = make_model(name, models_dir)
    cache, socket = work / f"{name}-cache", work / f"{name}.sock"
    daemon = Daemon(cache, socket)
    daemon.start()
    rows = []
    try:
        for kind, flags in (("packed", []), ("thin", ["--thin"])):
            artifact = work / f"{name}-{kind}.fca"
            daemon.run("submit", model, "-o", artifact, *flags)
            x = input_file(daemon, artifact, work)
            subprocess.run(["cat", str(artifact)], check=True, stdout=subprocess.DEVNULL)
            timings(daemon, artifact, x)
            verified, unverified = [], []
            for _ in range(runs):
                verified.append(timings(daemon, artifact, x))
                unverified.append(timings(daemon, artifact, x, "--no-verify"))
            nbytes = verified_bytes(daemon, artifact)
            row = {"model": name, "kind": kind, "bytes": nbytes,
                   "open_ms": statistics.median(t[0] for t in verified),
                   "open_no_verify_ms": statistics.median(t[0] for t in unverified),
                   "first_ms": statistics.median(t[1] for t in verified),
                   "first_no_verify_ms": statistics.median(t[1] for t in unverified),
                   "cpu_s": statistics.median(t[2] for t in verified),
                   "cpu_no_verify_s": statistics.median(t[2] for t in unverified)}
            if kind == "packed":
                row["sha256sum_s"], row["sha256sum_cpu_s"] = timed_median(
                    ["sha256sum", str(artifact)])
                row["openssl_s"], row["openssl_cpu_s"] = timed_median(
                    ["openssl", "dgst", "-sha256", str(artifact)])
            rows.append(row)
    finally:
        daemon.stop()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,big2g")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=pathlib.Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    work = args.dir or pathlib.Path(tempfile.mkdtemp(prefix="flowc-verify-bench."))
    work.mkdir(parents=True, exist_ok=True)
    print(cpu_line())
    print(f"{version_of([str(BIN / 'flowc'), '--version'])}; "
          f"{version_of(['sha256sum', '--version'])}; {version_of(['openssl', 'version'])}")
    print(f"medians of {args.runs} fresh `flowc run` processes each, warm page cache; "
          "open = open_ms, first = first_run_ms (open + session + first run)")
    print(f"{'model':<9} {'kind':<6} {'MB':>7} {'open':>9} {'open -nv':>9} {'cost':>8} "
          f"{'GB/s':>6} {'first':>9} {'first -nv':>10} {'GB/cpu-s':>8} | sha256sum, openssl "
          "dgst (GB/s, GB per CPU-second)")
    try:
        for name in args.models.split(","):
            for row in bench(name, work / "models", work, args.runs):
                cost = row["open_ms"] - row["open_no_verify_ms"]
                speed = row["bytes"] / (cost / 1e3) / 1e9 if cost > 0 else float("inf")
                # CPU seconds do not grow with other load on the machine.
                cpu = row["cpu_s"] - row["cpu_no_verify_s"]
                per_cpu = row["bytes"] / cpu / 1e9 if cpu > 0 else float("inf")
                peer = ""
                if "sha256sum_s" in row:
                    gb = row["bytes"] / 1e9
                    peer = (f"{row['sha256sum_s'] * 1e3:.0f} ms ({gb / row['sha256sum_s']:.2f}, "
                            f"{gb / row['sha256sum_cpu_s']:.2f}), "
                            f"{row['openssl_s'] * 1e3:.0f} ms ({gb / row['openssl_s']:.2f}, "
                            f"{gb / row['openssl_cpu_s']:.2f}); "
                            f"cost / sha256sum {cost / 1e3 / row['sha256sum_s']:.2f}x")
                print(f"{row['model']:<9} {row['kind']:<6} {row['bytes'] / 1e6:7.1f} "
                      f"{row['open_ms']:7.1f}ms {row['open_no_verify_ms']:7.1f}ms "
                      f"{cost:6.1f}ms {speed:6.2f} {row['first_ms']:7.1f}ms "
                      f"{row['first_no_verify_ms']:8.1f}ms {per_cpu:8.2f} | {peer}", flush=True)
    finally:
        if not args.keep:
            for path in work.glob("*-cache"):
                shutil.rmtree(path, ignore_errors=True)
            for path in work.glob("*.fca"):
                path.unlink()
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
