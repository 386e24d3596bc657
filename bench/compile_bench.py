#!/usr/bin/env python3
"""Compile-service figures on the example models, each next to its peer
from the same run. Prints figures; asserts nothing.

    .venv/bin/python bench/compile_bench.py [--repeats N]

- cold compile (cache miss), warm submit (cache hit), weights-only change
  (code reused, re-linked), all as wall time of `flowc submit`, and the
  daemon's peak RSS; peer: onnxruntime InferenceSession creation.
- run latency (median, p90) of the artifact through the runtime; peer:
  onnxruntime with one intra-op thread and with its default.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "examples"))
import make_models  # noqa: E402


def timed(cmd):
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, out


def daemon_peak_rss_mib(cache_dir):
    status = json.loads(subprocess.run([BIN / "flowc", "--cache-dir", cache_dir, "status",
                                        "--json"], capture_output=True, text=True).stdout)
    for line in pathlib.Path(f"/proc/{status['pid']}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ort_session_seconds(path, threads=0):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    start = time.perf_counter()
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return time.perf_counter() - start, session


def ort_latency_ms(session, feeds, repeats):
    for _ in range(5):
        session.run(None, feeds)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feeds)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[len(samples) * 9 // 10]


def bench_model(name, model, model_v2, input_name, shape, tmp, repeats):
    cache = tmp / f"cache-{name}"
    flowc = [BIN / "flowc", "--cache-dir", cache]
    path, path_v2 = tmp / f"{name}.onnx", tmp / f"{name}_v2.onnx"
    onnx.save(model, path)
    onnx.save(model_v2, path_v2)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.save(tmp / f"{name}_x.npy", x)
    subprocess.run(flowc + ["daemon", "start"], check=True, capture_output=True)
    try:
        cold, _ = timed(flowc + ["submit", path, "-o", tmp / f"{name}.fca", "--json"])
        warm = statistics.median(
            timed(flowc + ["submit", path, "-o", tmp / f"{name}.fca"])[0] for _ in range(repeats))
        relink, out = timed(flowc + ["submit", path_v2, "-o", tmp / f"{name}_v2.fca", "--json"])
        assert json.loads(out)["code_cache"] == "hit"
        rss = daemon_peak_rss_mib(cache)
    finally:
        subprocess.run(flowc + ["daemon", "stop"], capture_output=True)
    ort_init, _ = ort_session_seconds(path)
    _, run = timed([BIN / "runtime_bench", tmp / f"{name}.fca", f"{input_name}={tmp / f'{name}_x.npy'}",
                    str(max(repeats, 20))])
    ours = json.loads(run)
    _, one = ort_session_seconds(path, threads=1)
    _, default = ort_session_seconds(path)
    ort1 = ort_latency_ms(one, {input_name: x}, max(repeats, 20))
    ortd = ort_latency_ms(default, {input_name: x}, max(repeats, 20))
    print(f"{name}:")
    print(f"  compile cold {cold * 1000:8.1f} ms | onnxruntime session init {ort_init * 1000:7.1f} ms"
          f" | ratio {cold / ort_init:.2f}x")
    print(f"  submit warm (cache hit) {warm * 1000:6.1f} ms | ratio to ort init "
          f"{warm / ort_init:.2f}x")
    print(f"  weights-only change (re-link) {relink * 1000:6.1f} ms")
    print(f"  flowcd peak RSS {rss:.0f} MiB")
    print(f"  run median {ours['median_ms']:.3f} ms p90 {ours['p90_ms']:.3f} ms | onnxruntime "
          f"1 thread {ort1[0]:.3f} ms ({ours['median_ms'] / ort1[0]:.2f}x), default threads "
          f"{ortd[0]:.3f} ms ({ours['median_ms'] / ortd[0]:.2f}x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flowc-bench-") as tmp:
        tmp = pathlib.Path(tmp)
        rng = lambda seed: np.random.default_rng(seed)  # noqa: E731
        bench_model("cnn", make_models.make_cnn(rng(0)), make_models.make_cnn(rng(1)), "image",
                    (1, 3, 32, 32), tmp, args.repeats)
        bench_model("mlp", make_models.make_mlp(rng(0)), make_models.make_mlp(rng(1)), "x",
                    (4, 4, 16), tmp, args.repeats)


if __name__ == "__main__":
    main()
