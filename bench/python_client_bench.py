#!/usr/bin/env python3
"""Latency of the Python client's in-process runs: `Artifact.run` (ctypes
over the runtime's C API, docs/python.md) against onnxruntime's
`InferenceSession.run` on the same model and inputs, and the binding's
per-call overhead on a tiny model. Prints figures; asserts nothing.

    .venv/bin/python bench/python_client_bench.py [--models cnn,mlp,tiny,resnet18]
                                                  [--runs 200] [--threads 0]

Per model, on its own daemon and fresh cache: flowc.compile, then --runs
timed calls of flowc and then of onnxruntime, each after 20 warm-up calls;
the figures are medians and p90 of single calls, in ms, and the ratio
flowc/onnxruntime. The overhead of the binding is the tiny model's
(one Relu on 4x8 floats) `Artifact.run` median minus the median of
`flowc run --bench` on the same artifact, which times the C++ session run
with no Python in the loop. Models: `cnn` and `mlp` are the example models
(examples/make_models.py), `tiny` the Relu, `resnet18`/`resnet50` torchvision's
with seeded random weights (exported by /usr/bin/python3
examples/export_torchvision.py; a cold compile takes a minute or more).
Needs the client installed (scripts/setup.sh does) and build/bin built.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(os.environ.get("FLOWC_BIN_DIR", ROOT / "build" / "bin"))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))
import make_models  # noqa: E402
from hostinfo import cpu_line  # noqa: E402


def tiny_model(path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return path


def make(name, work):
    """(model path, {input name: array})."""
    rng = np.random.default_rng(0)
    if name == "tiny":
        return tiny_model(work / "tiny.onnx"), {"x": rng.standard_normal((4, 8), np.float32)}
    if name in ("cnn", "mlp"):
        model = make_models.make_cnn(rng) if name == "cnn" else make_models.make_mlp(rng)
        path = work / f"{name}.onnx"
        onnx.save(model, str(path))
        shape = (1, 3, 32, 32) if name == "cnn" else (4, 4, 16)
        first = model.graph.input[0].name
        return path, {first: rng.standard_normal(shape).astype(np.float32)}
    subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
                    str(work), "--models", name, "--opset", "17"], check=True,
                   capture_output=True, text=True, timeout=1800)
    return work / f"{name}.onnx", {"input": np.load(work / f"{name}_input.npy")}


def timed(fn, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def summary(times):
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))]


def bench_model(flowc, name, work, runs, threads):
    path, inputs = make(name, work)
    start = time.perf_counter()
    artifact = flowc.compile(path, progress=False, threads=threads)
    compile_s = time.perf_counter() - start
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ours = lambda: artifact.run(**inputs)  # noqa: E731
    theirs = lambda: session.run(None, inputs)  # noqa: E731
    # Each side in a block of its own: onnxruntime's threads spin-wait
    # after a run, and libomp's too, so interleaved calls would time each
    # one against the other's spinning threads.
    timed(ours, 20)
    flowc_times = timed(ours, runs)
    timed(theirs, 20)
    ort_times = timed(theirs, runs)
    # The answers agree (as tests/python checks), so the figures compare
    # the same work.
    expected = session.run(None, inputs)[0]
    got = next(iter(artifact.run(**inputs).values()))
    error = float(np.max(np.abs(got - expected))) / max(float(np.max(np.abs(expected))), 1e-30)
    return artifact, inputs, compile_s, summary(flowc_times), summary(ort_times), error


def cli_median_ms(artifact, inputs, work, runs):
    """`flowc run --bench` of the artifact: the C++ session run alone."""
    args = []
    for i, (name, value) in enumerate(inputs.items()):
        np.save(work / f"in{i}.npy", value)
        args += ["--input", f"{name}={work / f'in{i}.npy'}"]
    out = subprocess.run([str(BIN / "flowc"), "run", artifact.path, *args, "--bench",
                          str(runs), "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["median_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,mlp,tiny")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    import flowc

    print(cpu_line())
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}, "
          f"runs {args.runs}, threads {args.threads or 'all'}")
    print(f"{'model':10} {'compile_s':>9} {'flowc_ms':>9} {'p90':>8} {'ort_ms':>9} {'p90':>8} "
          f"{'flowc/ort':>9} {'rel_err':>8}")
    with tempfile.TemporaryDirectory(prefix="flowc-pybench-") as tmp:
        for name in args.models.split(","):
            work = pathlib.Path(tmp) / name
            work.mkdir()
            # A daemon and cache of its own per model.
            os.environ.update(FLOWC_CACHE_DIR=str(work / "cache"),
                              FLOWC_SOCKET=str(work / "d.sock"), FLOWC_BIN_DIR=str(BIN))
            flowc._compile._default_connection = None
            try:
                artifact, inputs, compile_s, (ours, ours90), (theirs, theirs90), error = \
                    bench_model(flowc, name, work, args.runs, args.threads)
                print(f"{name:10} {compile_s:9.2f} {ours:9.4f} {ours90:8.4f} {theirs:9.4f} "
                      f"{theirs90:8.4f} {ours / theirs:9.2f} {error:8.1e}")
                if name == "tiny":
                    native = cli_median_ms(artifact, inputs, work, args.runs)
                    print(f"  binding overhead per call (tiny): Artifact.run {ours * 1e3:.1f} us "
                          f"- flowc run --bench {native * 1e3:.1f} us = "
                          f"{(ours - native) * 1e3:.1f} us")
                artifact.close()
            finally:
                subprocess.run([str(BIN / "flowc"), "daemon", "stop"], capture_output=True)


if __name__ == "__main__":
    main()
