#!/usr/bin/env python3
"""float16 models (docs/compiler.md, Half precision): flowc next to
onnxruntime on the same float16 file, and both on the float32 original, same
run, same thread count. Prints figures; asserts nothing.

    .venv/bin/python bench/half_bench.py [--models resnet18,mobilenet_v3_small,bert]
        [--runs 20] [--rounds 3] [--threads 2] [--keep DIR]

Each model is exported with seeded random weights (examples/, as the tests
do) and rewritten as float16 by examples/to_float16.py. flowc compiles both
files on a fresh cache (`flowc submit -O 3`) and `flowc run --bench` times
each (median of --runs runs); onnxruntime's CPU provider runs the same two
files. Timing is interleaved: in each of --rounds rounds every configuration
times --runs runs in turn, and each reports the median of its rounds.
Ratios are onnxruntime / flowc: above 1 means flowc is faster. `error` is
max|flowc - onnxruntime| / max|onnxruntime| on the float16 file, next to
the same for onnxruntime's float16 run against its float32 one (how far
float16 itself moves the output). Sizes: the .onnx files and the artifacts
(a float16 artifact holds the float16 weights and, for the library kernels,
their float32 packing, computed once at link).
"""
import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "examples"))
from hostinfo import cpu_line  # noqa: E402
from timing import median_p90  # noqa: E402
import to_float16  # noqa: E402

TRANSFORMERS = {"bert", "gpt2"}
SEQ = 128


def export(model, out_dir):
    """The float32 export and its inputs (name -> array)."""
    if model in TRANSFORMERS:
        cmd = [ROOT / ".venv-export" / "bin" / "python", ROOT / "examples" /
               "export_transformers.py", out_dir, "--models", model, "--seq", str(SEQ)]
    else:
        cmd = ["/usr/bin/python3", ROOT / "examples" / "export_torchvision.py", out_dir,
               "--models", model]
    subprocess.run(cmd + ["--opset", "17"], check=True, capture_output=True)
    inputs = {npy.stem[len(model) + 1:]: np.load(npy)
              for npy in sorted(out_dir.glob(f"{model}_*.npy"))}
    return out_dir / f"{model}.onnx", inputs


def relative_error(output, reference):
    output, reference = output.astype(np.float64), reference.astype(np.float64)
    return float(np.max(np.abs(output - reference)) / max(np.max(np.abs(reference)), 1e-30))


class Flowc:
    """The CLI on one fresh cache and daemon."""

    def __init__(self, work):
        self.work = work
        self.base = [str(BIN / "flowc"), "--cache-dir", str(work / "cache"), "--socket",
                     str(work / "flowcd.sock")]

    def __call__(self, *args):
        return subprocess.run(self.base + [str(a) for a in args], check=True,
                              capture_output=True, text=True)

    def compile(self, onnx_path):
        artifact = onnx_path.with_suffix(".fca")
        start = time.perf_counter()
        self("submit", onnx_path, "-o", artifact, "-O", "3")
        return artifact, time.perf_counter() - start

    def input_args(self, artifact, feeds):
        args = []
        for name, value in feeds.items():
            path = self.work / f"{artifact.stem}_{name}.npy"
            np.save(path, value)
            args += ["--input", f"{name}={path}"]
        return args

    def run(self, artifact, feeds, runs, threads):
        """(median, p90), first run ms, first output."""
        report = json.loads(self("run", artifact, *self.input_args(artifact, feeds),
                                 "--output-dir", self.work / f"out_{artifact.stem}",
                                 "--bench", runs, "--threads", threads, "--json").stdout)
        output = np.load(report["outputs"][0]["file"])
        return (report["median_ms"], report["p90_ms"]), report["first_run_ms"], output


def interleaved(timers, rounds):
    samples = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            samples[name].append(timer())
    return {name: float(np.median([s[0] for s in runs])) for name, runs in samples.items()}


def session(path, threads, optimized=True):
    """onnxruntime's CPU provider on `path` with `threads` threads; without
    its graph rewrites unless `optimized`."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def parse_arguments(description, default_models):
    """The options this benchmark and bench/quant_bench.py take; prints the
    machine and onnxruntime line every figure goes with."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models", default=default_models)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--keep", type=pathlib.Path, help="work directory to keep")
    args = parser.parse_args()
    print(cpu_line())
    print(f"onnxruntime {ort.__version__}, {args.threads} threads, {args.runs} runs x "
          f"{args.rounds} rounds")
    return parser, args


@contextlib.contextmanager
def work_root(keep, prefix):
    """`keep`, made if missing, or a temporary directory removed after."""
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield pathlib.Path(tmp)


def bench(model, args, root):
    work = root / model
    work.mkdir()
    single_path, single_feeds = export(model, work)
    half_path = work / f"{model}_fp16.onnx"
    onnx.save(to_float16.to_float16(onnx.load(single_path)), half_path)
    half_feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v
                  for k, v in single_feeds.items()}
    ort_half = session(half_path, args.threads)
    ort_single = session(single_path, args.threads)
    flowc = Flowc(work)
    flowc("daemon", "start")
    try:
        half_artifact, half_compile_s = flowc.compile(half_path)
        single_artifact, single_compile_s = flowc.compile(single_path)
    finally:
        flowc("daemon", "stop")
    _, half_first_ms, half_output = flowc.run(half_artifact, half_feeds, 1, args.threads)
    _, single_first_ms, _ = flowc.run(single_artifact, single_feeds, 1, args.threads)
    ort_half_output = ort_half.run(None, half_feeds)[0]
    ort_single_output = ort_single.run(None, single_feeds)[0]
    latency = interleaved({
        "flowc_fp16": lambda: flowc.run(half_artifact, half_feeds, args.runs, args.threads)[0],
        "flowc_fp32": lambda: flowc.run(single_artifact, single_feeds, args.runs,
                                        args.threads)[0],
        "ort_fp16": lambda: median_p90(lambda: ort_half.run(None, half_feeds), args.runs),
        "ort_fp32": lambda: median_p90(lambda: ort_single.run(None, single_feeds), args.runs),
    }, args.rounds)
    mib = lambda path: path.stat().st_size / 2**20  # noqa: E731
    print(f"{model}:")
    print(f"  float16  flowc {latency['flowc_fp16']:8.2f} ms   onnxruntime "
          f"{latency['ort_fp16']:8.2f} ms ({latency['ort_fp16'] / latency['flowc_fp16']:.2f}x)"
          f"   error {relative_error(half_output, ort_half_output):.1e} "
          f"(onnxruntime fp16 vs fp32 {relative_error(ort_half_output, ort_single_output):.1e})")
    print(f"  float32  flowc {latency['flowc_fp32']:8.2f} ms   onnxruntime "
          f"{latency['ort_fp32']:8.2f} ms ({latency['ort_fp32'] / latency['flowc_fp32']:.2f}x)")
    print(f"  flowc float16 / float32 latency {latency['flowc_fp16'] / latency['flowc_fp32']:.2f}"
          f"; float16 / float32 compile {half_compile_s:.1f} s / {single_compile_s:.1f} s, "
          f"first run {half_first_ms:.0f} ms / {single_first_ms:.0f} ms")
    print(f"  sizes float16 / float32 (MiB): onnx {mib(half_path):.1f} / {mib(single_path):.1f}, "
          f"artifact {mib(half_artifact):.1f} / {mib(single_artifact):.1f}")


def main():
    _, args = parse_arguments(__doc__.splitlines()[0], "resnet18,mobilenet_v3_small,bert")
    with work_root(args.keep, "half_bench.") as root:
        for model in args.models.split(","):
            bench(model, args, root)

if __name__ == "__main__":
    os.environ.pop("FLOWC_SOCKET", None)
    # onnxruntime warns that it cannot constant-fold a float16 Pow on the CPU.
    ort.set_default_logger_severity(3)
    main()
