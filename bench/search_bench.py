#!/usr/bin/env python3
"""Search's gain: latency before and after trial-run search, the search's
wall time with 1 and 2 local workers, records shared with another cache, and
a noise check. Prints figures; asserts nothing.

    .venv-bench/bin/python bench/search_bench.py [--models resnet50,mobilenet_v3_small,bert,gpt2]
                                                 [--batches 1,8] [--budget exhaustive|SECONDS]
                                                 [--runs 20] [--threads 2] [--keep DIR]

For each model and batch size (exports as bench/model_bench.py makes them):
  1. cache A, `flowcd --workers 1`: `flowc submit -O3` with no search, then
     `flowc run --bench` (median of --runs): "no search";
  2. cache A again with `--search-budget BUDGET`: the search's wall time and
     candidates measured, then the latency: "after search";
  3. cache B, `flowcd --workers 2`, the same search from an empty database:
     its wall time with 2 workers;
  4. cache C: `flowc tuning import` of A's export, then a submit with no
     budget: it must measure 0 candidates, and its latency is printed;
  5. noise: A's and B's records are two independent tunings; on every
     kernel whose winner in A was separated from its runner-up by more than
     the confidence interval, do they choose the same candidate?
onnxruntime's latency on the same file, same threads, is the peer figure
(ratio = onnxruntime / flowc: above 1 means flowc is faster).
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from hostinfo import cpu_line  # noqa: E402
from model_bench import BIN, export, median_p90  # noqa: E402


class Cache:
    """One cache directory and its daemon."""

    def __init__(self, root: pathlib.Path, workers: int):
        self.root = root
        self.workers = workers
        self.base = [str(BIN / "flowc"), "--cache-dir", str(root / "cache"), "--socket",
                     str(root / "flowcd.sock")]
        self.daemon = None

    def __enter__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "flowcd.log", "ab")
        self.daemon = subprocess.Popen(
            [str(BIN / "flowcd"), "--cache-dir", str(self.root / "cache"), "--socket",
             str(self.root / "flowcd.sock"), "--workers", str(self.workers)],
            stdout=log, stderr=log)
        for _ in range(500):
            status = subprocess.run(self.base + ["status", "--json"], capture_output=True,
                                    text=True).stdout
            if '"running":true' in status.replace(" ", ""):
                return self
            time.sleep(0.02)
        raise RuntimeError("flowcd did not start: see " + str(self.root / "flowcd.log"))

    def __exit__(self, *exc):
        self.daemon.terminate()
        self.daemon.wait(timeout=120)

    def run(self, *args):
        return subprocess.run(self.base + [str(a) for a in args], check=True,
                              capture_output=True, text=True).stdout

    def submit(self, model, out, *options):
        start = time.perf_counter()
        result = json.loads(self.run("submit", model, "-o", out, "-O", "3", "--json",
                                     *options))
        result["wall_s"] = time.perf_counter() - start
        return result

    def records(self):
        return json.loads(self.run("tuning", "ls", "--json"))


def latency(cache, artifact, inputs, names, runs, threads, work):
    args = []
    for name, path in inputs.items():
        args += ["--input", f"{names[name]}={path}"]
    out = json.loads(cache.run("run", artifact, *args, "--output-dir", work / "out", "--bench",
                               runs, "--threads", threads, "--json"))
    return out["median_ms"], np.load(out["outputs"][0]["file"])


def bests(records):
    """signature -> (best record, runner-up record or None)."""
    by = {}
    for record in records:
        by.setdefault(record["signature"], []).append(record)
    out = {}
    for signature, group in by.items():
        group.sort(key=lambda r: r["time_ns"])
        out[signature] = (group[0], group[1] if len(group) > 1 else None)
    return out


def noise_check(a, b):
    """(agree, disagree, separated kernels) over A's clearly separated ones."""
    agree = disagree = 0
    first, second = bests(a), bests(b)
    for signature, (best, runner) in first.items():
        if runner is None or signature not in second:
            continue
        if best["time_ns"] + best["spread_ns"] >= runner["time_ns"] - runner["spread_ns"]:
            continue
        if second[signature][0]["candidate"] == best["candidate"]:
            agree += 1
        else:
            disagree += 1
    return agree, disagree


def bench(model, batch, args, root):
    work = root / f"{model}-b{batch}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    onnx_path, inputs = export(model, batch, root / "models" / f"b{batch}")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"],
                                   sess_options=ort_options(args.threads))
    graph_inputs = [i.name for i in session.get_inputs()]
    # Torchvision exports name their one input "input"; transformer inputs
    # are named as in the graph (as bench/model_bench.py maps them).
    names = {name: (graph_inputs[0] if name == "input" else name) for name in inputs}
    feeds = {names[name]: np.load(path) for name, path in inputs.items()}
    ort_ms, _ = median_p90(lambda: session.run(None, feeds), args.runs)
    budget = ["--search-budget", args.budget]
    row = {"model": model, "batch": batch, "onnxruntime_ms": ort_ms}
    with Cache(work / "a", workers=1) as a:
        plain = a.submit(onnx_path, work / "plain.fca")
        row["no_search_ms"], reference = latency(a, work / "plain.fca", inputs, names,
                                                 args.runs, args.threads, work)
        searched = a.submit(onnx_path, work / "searched.fca", *budget)
        row["search"] = searched["search"]
        row["search_1_worker_s"] = searched["search"]["seconds"]
        row["after_search_ms"], tuned_out = latency(a, work / "searched.fca", inputs, names,
                                                    args.runs, args.threads, work)
        scale = max(float(np.max(np.abs(reference))), 1e-30)
        row["max_rel_error"] = float(np.max(np.abs(tuned_out - reference))) / scale
        a.run("tuning", "export", "-o", work / "records.json")
        records_a = a.records()
        row["plain_compile_s"] = plain["wall_s"]
    with Cache(work / "b", workers=2) as b:
        again = b.submit(onnx_path, work / "b.fca", *budget)
        row["search_2_workers_s"] = again["search"]["seconds"]
        records_b = b.records()
    with Cache(work / "c", workers=1) as c:
        c.run("tuning", "import", work / "records.json")
        shared = c.submit(onnx_path, work / "c.fca")
        row["shared_measured"] = shared["search"]["candidates_measured"]
        row["shared_tuned"] = shared["search"]["tuned_kernels"]
        row["shared_ms"], _ = latency(c, work / "c.fca", inputs, names, args.runs,
                                      args.threads, work)
    row["noise_agree"], row["noise_disagree"] = noise_check(records_a, records_b)
    return row


def ort_options(threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return options


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v3_small,bert,gpt2")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--budget", default="exhaustive")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--keep", help="work directory to keep (exports are reused)")
    args = parser.parse_args()
    print(cpu_line())
    print(f"search budget {args.budget}; {args.runs} timed runs; {args.threads} threads")
    root = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp())
    rows = []
    header = (f"{'model':<20}{'batch':>6}{'no search':>11}{'searched':>10}{'gain':>7}"
              f"{'kernels':>9}{'cands':>7}{'1 wkr s':>9}{'2 wkr s':>9}{'shared':>9}"
              f"{'meas.':>6}{'ort':>9}{'ort/fc':>7}{'noise ok/bad':>13}")
    print(header)
    for model in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            row = bench(model, batch, args, root)
            rows.append(row)
            s = row["search"]
            print(f"{model:<20}{batch:>6}{row['no_search_ms']:>9.2f}ms"
                  f"{row['after_search_ms']:>8.2f}ms"
                  f"{row['no_search_ms'] / row['after_search_ms']:>6.2f}x"
                  f"{s['measured_kernels']:>4}/{s['tunable_kernels']:<4}"
                  f"{s['candidates_measured']:>7}{row['search_1_worker_s']:>9.1f}"
                  f"{row['search_2_workers_s']:>9.1f}{row['shared_ms']:>7.2f}ms"
                  f"{row['shared_measured']:>6}{row['onnxruntime_ms']:>7.2f}ms"
                  f"{row['onnxruntime_ms'] / row['after_search_ms']:>7.2f}"
                  f"{row['noise_agree']:>7}/{row['noise_disagree']:<5}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
