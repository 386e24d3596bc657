#!/usr/bin/env python3
"""Cache-hit latency: client wall time of `flowc submit MODEL -o OUT.fca` on
an unchanged model (a new process each time, so process start counts), next
to a ccache direct-mode hit from the same run. Prints figures; asserts
nothing.

    .venv/bin/python bench/hit_bench.py [--models cnn,resnet50,bert,big4g] [--runs 200]
                                        [--warmup 5] [--dir WORKDIR] [--keep]
                                        [--flowc-flags=--thin] [--json [FILE]]
                                        [--gpu-records N]

Per model, on its own daemon and fresh cache (`flowc --cache-dir D --socket S
daemon start`): one cold submit (a miss; its wall time is printed),
--warmup hits, then --runs timed hits: p50, p99 and mean in ms, with the
targets p50 <= 10 ms and p99 <= 25 ms marked PASS or MISS; the seconds the
daemon reports for the hit (the `in X s` of the submit line; and
`daemon_seconds` or `seconds` of `submit --json`); the artifact's size; the
daemon's peak RSS (VmHWM) after the cold compile and after the hits. Peer,
right after each model: `ccache gcc -c small.c -o small.o` with a temp
CCACHE_DIR and no other ccache configuration, one run to fill, then
--warmup + --runs timed direct-mode hits (checked in ccache's statistics);
ratio = flowc / ccache (above 1: flowc's hit is slower).

--gpu-records N imports N tuning records of a GPU (`gpu NVIDIA H200 sm_90`,
as `flowc run` keeps them) into each fresh cache before the daemon starts:
with --flowc-flags='--target cuda:sm_90' every hit then looks that GPU up
among the cache's devices, which must not cost more as records grow
(docs/cuda.md, trial runs and tuning records).

Models: `cnn` (examples/make_models.py, cheap: a quick run), `resnet50`
(/usr/bin/python3 examples/export_torchvision.py), `bert` (BERT-base,
seq 128, .venv-export/bin/python examples/export_transformers.py), `big4g`
(synthetic: 16 MatMul + Add layers of 8192 x 8192 float32, 4 GiB of
external data in one file, written streaming with bench/ingest_bench.py's
writer; needs ~4 GiB for the model plus the cache's copy and the artifacts:
put --dir where >20 GB are free). Exports and the generated model are
kept in --dir/models and reused when --dir is given.
"""
import argparse
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(os.environ.get("FLOWC_BIN_DIR", ROOT / "build" / "bin"))
EXPORT_PYTHON = ROOT / ".venv-export" / "bin" / "python"
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))
from hostinfo import cpu_line  # noqa: E402

GIB = 1 << 30
TARGET_P50_MS = 10.0
TARGET_P99_MS = 25.0
ALL_MODELS = ["cnn", "resnet50", "bert", "big4g"]

SMALL_C = """\
#include <stdio.h>
#include <string.h>

static int count(const char *s, char c) {
  int n = 0;
  for (; *s; ++s)
    n += *s == c;
  return n;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    printf("%s: %d spaces, %zu bytes\\n", argv[i], count(argv[i], ' '), strlen(argv[i]));
  return 0;
}
"""


# Host -----------------------------------------------------------------------

def version_of(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError:
        return "?"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if out.returncode == 0 and text else "?"


def vm_hwm_mib(pid):
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return float("nan")


# Models ---------------------------------------------------------------------

def files_of(model_path):
    """The model file and the external data files it names."""
    model = onnx.load(str(model_path), load_external_data=False)
    names = {e.value for t in model.graph.initializer for e in t.external_data
             if e.key == "location"}
    return [model_path] + [model_path.parent / n for n in sorted(names)]


def make_model(name, models_dir):
    """Path of the model `name`, made (or reused) under models_dir."""
    out = models_dir / name
    out.mkdir(parents=True, exist_ok=True)
    done = out / "done"
    if name == "cnn":
        path = out / "cnn.onnx"
    elif name in ("resnet50", "bert"):
        path = out / f"{name}.onnx"
    elif name == "big4g":
        path = out / "big4g.onnx"
    else:
        raise SystemExit(f"unknown model '{name}' (known: {', '.join(ALL_MODELS)})")
    if done.exists() and path.exists():
        print(f"  reusing {path}", flush=True)
        return path
    start = time.perf_counter()
    if name == "cnn":
        import make_models
        model = make_models.make_cnn(np.random.default_rng(0))
        onnx.save(model, path)
    elif name == "resnet50":
        subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
                        str(out), "--models", "resnet50"], check=True, capture_output=True)
    elif name == "bert":
        if not EXPORT_PYTHON.exists():
            raise SystemExit(f"{EXPORT_PYTHON} missing: run scripts/setup.sh test")
        subprocess.run([str(EXPORT_PYTHON), str(ROOT / "examples" / "export_transformers.py"),
                        str(out), "--models", "bert"], check=True, capture_output=True)
    elif name == "big4g":
        free = shutil.disk_usage(out).free
        if free < 20e9:
            print(f"  warning: {free / 1e9:.0f} GB free in {out}; big4g needs ~20 GB "
                  f"(model, cache copy, artifacts)", flush=True)
        import ingest_bench
        ingest_bench.write_external_model(path, 4 * GIB, files=1)
    done.write_text("")
    size = sum(f.stat().st_size for f in files_of(path))
    print(f"  made {path} ({size / 1e6:.1f} MB with its data) in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    return path


def wait_until_settled(files, age_s=2.5):
    """The daemon's stat memo never trusts a file modified in the last two
    seconds (ccache's rule); a just-written model would be re-hashed on
    every hit until then. Waits until every file is older than that."""
    newest = max(f.stat().st_mtime for f in files)
    delay = newest + age_s - time.time()
    if delay > 0:
        time.sleep(delay)


# Timing ---------------------------------------------------------------------

def percentile(samples, q):
    """Nearest-rank percentile of sorted samples."""
    return samples[max(0, math.ceil(q / 100 * len(samples)) - 1)]


def summary(samples_ms):
    s = sorted(samples_ms)
    return {"p50_ms": statistics.median(s), "p99_ms": percentile(s, 99),
            "mean_ms": statistics.fmean(s), "min_ms": s[0], "max_ms": s[-1], "runs": len(s)}


def timed(cmd, env, cwd=None):
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    return (time.perf_counter() - start) * 1000, result


def verdict(figures):
    p50 = "PASS" if figures["p50_ms"] <= TARGET_P50_MS else "MISS"
    p99 = "PASS" if figures["p99_ms"] <= TARGET_P99_MS else "MISS"
    return p50, p99


class Daemon:
    """flowc commands on one daemon, cache and socket of their own."""

    def __init__(self, cache_dir, socket):
        self.base = [str(BIN / "flowc"), "--cache-dir", str(cache_dir), "--socket", str(socket)]
        # No daemon is started behind the benchmark's back: if it dies, the
        # submits fail instead of timing a restart.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWC_")}
        self.env["FLOWC_AUTOSTART"] = "0"

    def run(self, *args, check=True, env=None):
        result = subprocess.run(self.base + list(map(str, args)), capture_output=True,
                                text=True, env=env or self.env)
        if check and result.returncode != 0:
            raise RuntimeError(f"flowc {' '.join(map(str, args))} failed "
                               f"({result.returncode}): {result.stderr.strip()}")
        return result

    def start(self):
        self.run("daemon", "start", env={k: v for k, v in self.env.items()
                                         if k != "FLOWC_AUTOSTART"})
        self.pid = None
        for _ in range(20):
            status = self.run("status", "--json", check=False)
            try:
                self.pid = json.loads(status.stdout).get("pid")
            except ValueError:
                self.pid = None
            if self.pid:
                break
            time.sleep(0.25)

    def stop(self):
        self.run("daemon", "stop", check=False)

    def peak_rss_mib(self):
        return vm_hwm_mib(self.pid) if self.pid else float("nan")


def submit_seconds(stdout_and_err):
    """The seconds of the submit line: 'flowc: cache hit in 0.001 s -> ...'."""
    m = re.search(r"\bin ([0-9.]+) s\b", stdout_and_err)
    return float(m.group(1)) if m else None


def bench_flowc(name, model, work, args, flags):
    cache_dir = work / f"cache-{name}"
    shutil.rmtree(cache_dir, ignore_errors=True)
    sock_dir = pathlib.Path(tempfile.mkdtemp(prefix="fhb-", dir="/tmp"))  # short: sun_path
    daemon = Daemon(cache_dir, sock_dir / "flowcd.sock")
    artifact = work / f"{name}.fca"
    artifact.unlink(missing_ok=True)
    submit = ["submit", str(model), "-o", str(artifact), *flags]
    row = {"model": name, "flowc_flags": flags}
    wait_until_settled(files_of(model))
    if args.gpu_records:
        import_gpu_records(cache_dir, work, args.gpu_records)
        row["gpu_records"] = args.gpu_records
    try:
        daemon.start()
        cold_ms, cold = timed(daemon.base + submit, daemon.env)
        if cold.returncode != 0:
            raise RuntimeError(f"cold submit failed ({cold.returncode}): {cold.stderr.strip()}")
        row["cold_ms"] = cold_ms
        row["cold_line"] = ((cold.stdout + cold.stderr).strip().splitlines() or [""])[-1]
        row["artifact_bytes"] = artifact.stat().st_size
        row["rss_after_cold_mib"] = daemon.peak_rss_mib()
        print(f"  cold submit {cold_ms / 1000:8.3f} s  artifact {artifact.stat().st_size / 1e6:.1f}"
              f" MB  daemon peak RSS {row['rss_after_cold_mib']:.0f} MiB", flush=True)
        for _ in range(args.warmup):
            timed(daemon.base + submit, daemon.env)
        samples, daemon_s, misses, failures = [], [], 0, 0
        for _ in range(args.runs):
            ms, result = timed(daemon.base + submit, daemon.env)
            text = result.stdout + result.stderr
            if result.returncode != 0:
                failures += 1
                continue
            if not re.search(r"\bhit\b", text):
                misses += 1
            samples.append(ms)
            seconds = submit_seconds(text)
            if seconds is not None:
                daemon_s.append(seconds * 1000)
        if not samples:
            raise RuntimeError(f"every timed submit failed: {result.stderr.strip()}")
        row.update(summary(samples))
        row["not_hits"], row["failures"] = misses, failures
        row["line_seconds_p50_ms"] = statistics.median(daemon_s) if daemon_s else None
        # The JSON figures, from a few more hits (not timed).
        reported = {}
        for _ in range(3):
            out = daemon.run(*submit, "--json", check=False)
            try:
                report = json.loads(out.stdout)
            except ValueError:
                break
            for key in ("daemon_seconds", "seconds"):
                if isinstance(report.get(key), (int, float)):
                    reported.setdefault(key, []).append(report[key] * 1000)
            row["json_cache"] = report.get("cache")
        row.update({f"json_{k}_p50_ms": statistics.median(v) for k, v in reported.items()})
        row["rss_after_hits_mib"] = daemon.peak_rss_mib()
    finally:
        daemon.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(cache_dir, ignore_errors=True)
            artifact.unlink(missing_ok=True)
    return row


def import_gpu_records(cache_dir, work, count):
    """`count` records of one GPU (distinct kernels), through `flowc tuning
    import`, as another machine's export would bring them."""
    records = [{"signature": f"library.conv2d:{i}", "device": "gpu NVIDIA H200 sm_90",
                "versions": "cuDNN 9.19.0, cuBLASLt 13.1.0; kernel abi 2",
                "candidate": "cudnn:engine=1;knobs=", "time_ns": 1000, "spread_ns": 0,
                "samples": 3, "separated": False, "noise": 0.0, "measured_ms": 1 + i,
                "host": "gpu-host"} for i in range(count)]
    document = work / "gpu-records.json"
    document.write_text(json.dumps({"format": "flowc.tuning.v1", "records": records}))
    subprocess.run([str(BIN / "flowc"), "--cache-dir", str(cache_dir), "tuning", "import",
                    str(document)], check=True, capture_output=True)
    document.unlink()


def bench_ccache(work, args):
    """ccache direct-mode hits on a small C file, in a fresh CCACHE_DIR."""
    d = work / "ccache"
    shutil.rmtree(d, ignore_errors=True)
    (d / "src").mkdir(parents=True)
    (d / "src" / "small.c").write_text(SMALL_C)
    (d / "ccache.conf").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCACHE_")}
    env.update(CCACHE_DIR=str(d / "dir"), CCACHE_CONFIGPATH=str(d / "ccache.conf"))
    cmd = ["ccache", "gcc", "-c", "small.c", "-o", "small.o"]
    fill_ms, result = timed(cmd, env, cwd=d / "src")
    if result.returncode != 0:
        raise RuntimeError(f"ccache failed: {result.stderr.strip()}")
    # ccache does not trust a just-modified file in direct mode either (its
    # guard against racy stats, like flowc's).
    wait_until_settled([d / "src" / "small.c"])
    for _ in range(args.warmup):
        timed(cmd, env, cwd=d / "src")
    samples = [timed(cmd, env, cwd=d / "src")[0] for _ in range(args.runs)]
    stats = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True,
                           env=env).stdout
    counters = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    row = summary(samples)
    row["fill_ms"] = fill_ms
    row["hits"] = args.warmup + args.runs
    row["direct_hits"] = int(counters.get("direct_cache_hit", -1))
    row["preprocessed_hits"] = int(counters.get("preprocessed_cache_hit", -1))
    shutil.rmtree(d, ignore_errors=True)
    return row


def bench_floor(args):
    """What starting the CLI costs before it talks to the daemon: `flowc
    --version` (or `--help` where that does not exist) as a new process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWC_")}
    flag = "--version"
    if subprocess.run([str(BIN / "flowc"), flag], capture_output=True, env=env).returncode:
        flag = "--help"
    cmd = [str(BIN / "flowc"), flag]
    for _ in range(args.warmup):
        timed(cmd, env)
    row = summary([timed(cmd, env)[0] for _ in range(min(args.runs, 100))])
    row["command"] = flag
    return row


def fmt_ms(value):
    return "   n/a" if value is None else f"{value:8.2f}"


def print_row(row, peer):
    p50, p99 = verdict(row)
    ratio50 = row["p50_ms"] / peer["p50_ms"]
    ratio99 = row["p99_ms"] / peer["p99_ms"]
    print(f"  flowc hit  p50 {row['p50_ms']:8.2f} ms [{p50} <= {TARGET_P50_MS:g}]  "
          f"p99 {row['p99_ms']:8.2f} ms [{p99} <= {TARGET_P99_MS:g}]  "
          f"mean {row['mean_ms']:8.2f} ms  (min {row['min_ms']:.2f}, max {row['max_ms']:.2f}, "
          f"{row['runs']} runs)", flush=True)
    reported = [f"submit line {fmt_ms(row.get('line_seconds_p50_ms')).strip()} ms (1 ms steps)"]
    for key in ("daemon_seconds", "seconds"):
        if f"json_{key}_p50_ms" in row:
            reported.append(f"--json {key} {row[f'json_{key}_p50_ms']:.2f} ms")
    print(f"  daemon-reported (p50): {', '.join(reported)}; peak RSS after hits "
          f"{row['rss_after_hits_mib']:.0f} MiB"
          + (f"; {row['not_hits']} runs not hits" if row["not_hits"] else "")
          + (f"; {row['failures']} runs failed" if row["failures"] else ""), flush=True)
    print(f"  ccache hit p50 {peer['p50_ms']:8.2f} ms  p99 {peer['p99_ms']:8.2f} ms  "
          f"mean {peer['mean_ms']:8.2f} ms  (fill {peer['fill_ms']:.1f} ms; "
          f"{peer['direct_hits']} direct hits of {peer['hits']})", flush=True)
    print(f"  ratio flowc / ccache: p50 {ratio50:.2f}x  p99 {ratio99:.2f}x", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="cnn,resnet50,bert,big4g",
                        help=f"comma-separated, of {','.join(ALL_MODELS)}")
    parser.add_argument("--runs", type=int, default=200, help="timed hits per model")
    parser.add_argument("--warmup", type=int, default=5, help="untimed hits first")
    parser.add_argument("--dir", type=pathlib.Path,
                        help="work directory (models are kept and reused there; "
                             "default: a temp directory, removed)")
    parser.add_argument("--keep", action="store_true",
                        help="keep each model's cache and artifact in --dir")
    parser.add_argument("--flowc-flags", default="",
                        help="extra `flowc submit` flags, one string: --flowc-flags=--thin "
                             "or --flowc-flags='--thin -O3' (with '=', as they start with -)")
    parser.add_argument("--gpu-records", type=int, default=0, metavar="N",
                        help="import N tuning records of a GPU into each cache first")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="also write the figures as JSON (to stdout without FILE)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    for program in ("flowc", "flowcd"):
        if not (BIN / program).exists():
            parser.error(f"{BIN / program} not found: build first (or set FLOWC_BIN_DIR)")
    if not shutil.which("ccache"):
        parser.error("ccache not found")
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in ALL_MODELS:
            parser.error(f"unknown model '{m}' (known: {', '.join(ALL_MODELS)})")
    flags = shlex.split(args.flowc_flags)

    temp = None
    if args.dir:
        work = args.dir.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        temp = tempfile.mkdtemp(prefix="flowc-hit-bench-")
        work = pathlib.Path(temp)

    print("hit_bench: `flowc submit MODEL -o OUT.fca"
          + (" " + " ".join(flags) if flags else "") + "` on an unchanged model, "
          f"{args.runs} timed runs after {args.warmup} warm-ups, each a new process"
          + (f", {args.gpu_records} GPU tuning records in the cache" if args.gpu_records
             else ""), flush=True)
    print(cpu_line() + ", load average %.1f %.1f %.1f" % os.getloadavg(), flush=True)
    print(f"flowc: {version_of([str(BIN / 'flowc'), '--version'])} ({BIN}); "
          f"{version_of(['ccache', '--version'])}; {version_of(['gcc', '--version'])}; "
          f"work dir {work} ({shutil.disk_usage(work).free / 1e9:.0f} GB free); "
          f"targets p50 <= {TARGET_P50_MS:g} ms, p99 <= {TARGET_P99_MS:g} ms", flush=True)
    floor = bench_floor(args)
    print(f"process floor, `flowc {floor['command']}` (no daemon contact): "
          f"p50 {floor['p50_ms']:.2f} ms  p99 {floor['p99_ms']:.2f} ms", flush=True)
    rows = []
    try:
        for name in models:
            print(f"{name}:", flush=True)
            model = make_model(name, work / "models")
            row = bench_flowc(name, model, work, args, flags)
            peer = bench_ccache(work, args)
            row["ccache"] = peer
            row["ratio_p50"] = row["p50_ms"] / peer["p50_ms"]
            row["ratio_p99"] = row["p99_ms"] / peer["p99_ms"]
            row["target_p50"], row["target_p99"] = verdict(row)
            print_row(row, peer)
            rows.append(row)
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)
    if rows:
        print()
        print(f"{'model':>9} | {'cold s':>8} | {'flowc p50':>9} {'p99':>8} {'mean':>8} | "
              f"{'ccache p50':>10} {'p99':>6} | {'ratio p50':>9} | {'targets':>11} | artifact MB")
        for r in rows:
            print(f"{r['model']:>9} | {r['cold_ms'] / 1000:8.2f} | {r['p50_ms']:9.2f} "
                  f"{r['p99_ms']:8.2f} {r['mean_ms']:8.2f} | {r['ccache']['p50_ms']:10.2f} "
                  f"{r['ccache']['p99_ms']:6.2f} | {r['ratio_p50']:8.1f}x | "
                  f"{r['target_p50']}/{r['target_p99']:>4} | {r['artifact_bytes'] / 1e6:.1f}")
    if args.json:
        text = json.dumps({"host": cpu_line(), "runs": args.runs, "process_floor": floor,
                           "rows": rows}, indent=1)
        if args.json == "-":
            print(text)
        else:
            pathlib.Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
