#!/usr/bin/env python3
"""Quantized models (docs/compiler.md, Quantized models): flowc next to
onnxruntime on the same 8-bit file, and both on the float32 original, same
run, same thread count. Prints figures; asserts nothing.

    .venv/bin/python bench/quant_bench.py [--models resnet18:static,bert:dynamic,bert:static]
        [--runs 20] [--rounds 3] [--threads 2] [--keep DIR]

Each model is exported with seeded random weights (examples/, as the tests
do) and quantized by onnxruntime's own tools (examples/quantize.py): `static`
is the QDQ format (int8 weights and activations, calibrated on seeded random
inputs), `static-pc` the same with a scale per output channel, `dynamic`
int8 MatMul weights with activations quantized at run time. flowc runs
MatMulInteger of a weight and the QDQ MatMul and Gemm products in its int8
product kernel, the QDQ convolutions in its int8 convolution kernel, and the
rest in float32 (other weights dequantized once at link); onnxruntime runs
its int8 kernels. Timing as bench/half_bench.py: interleaved rounds, medians.
Ratios are onnxruntime / flowc: above 1 means flowc is faster. `error` is
max|flowc - reference| / max|reference|, the reference being onnxruntime
without its graph rewrites (each quantization op as ONNX defines it), next
to the same for onnxruntime's int8 kernels; `quantization` is how far
quantizing moved onnxruntime's output from the float32 model's.
"""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from half_bench import (Flowc, export, interleaved, parse_arguments,  # noqa: E402
                        relative_error, session, work_root)
from timing import median_p90  # noqa: E402

MODES = {"static": ["static"], "static-pc": ["static", "--per-channel"],
         "dynamic": ["dynamic"]}


def bench(model, mode, args, root):
    work = root / f"{model}_{mode}"
    work.mkdir()
    single_path, feeds = export(model, work)
    quant_path = work / f"{model}_{mode}.onnx"
    subprocess.run([sys.executable, ROOT / "examples" / "quantize.py", *MODES[mode][:1],
                    single_path, quant_path, *MODES[mode][1:]], check=True, capture_output=True)
    ort_quant = session(quant_path, args.threads)
    ort_single = session(single_path, args.threads)
    reference = session(quant_path, args.threads, optimized=False).run(None, feeds)[0]
    flowc = Flowc(work)
    flowc("daemon", "start")
    try:
        quant_artifact, quant_compile_s = flowc.compile(quant_path)
        single_artifact, single_compile_s = flowc.compile(single_path)
    finally:
        flowc("daemon", "stop")
    _, _, quant_output = flowc.run(quant_artifact, feeds, 1, args.threads)
    ort_output = ort_quant.run(None, feeds)[0]
    single_output = ort_single.run(None, feeds)[0]
    latency = interleaved({
        "flowc_int8": lambda: flowc.run(quant_artifact, feeds, args.runs, args.threads)[0],
        "flowc_fp32": lambda: flowc.run(single_artifact, feeds, args.runs, args.threads)[0],
        "ort_int8": lambda: median_p90(lambda: ort_quant.run(None, feeds), args.runs),
        "ort_fp32": lambda: median_p90(lambda: ort_single.run(None, feeds), args.runs),
    }, args.rounds)
    mib = lambda path: path.stat().st_size / 2**20  # noqa: E731
    print(f"{model} ({mode}):")
    print(f"  8-bit    flowc {latency['flowc_int8']:8.2f} ms   onnxruntime "
          f"{latency['ort_int8']:8.2f} ms ({latency['ort_int8'] / latency['flowc_int8']:.2f}x)"
          f"   error {relative_error(quant_output, reference):.1e} "
          f"(onnxruntime int8 kernels {relative_error(ort_output, reference):.1e}; "
          f"quantization {relative_error(ort_output, single_output):.1e})")
    print(f"  float32  flowc {latency['flowc_fp32']:8.2f} ms   onnxruntime "
          f"{latency['ort_fp32']:8.2f} ms ({latency['ort_fp32'] / latency['flowc_fp32']:.2f}x)")
    print(f"  flowc 8-bit / float32 latency {latency['flowc_int8'] / latency['flowc_fp32']:.2f}"
          f"; compile {quant_compile_s:.1f} s / {single_compile_s:.1f} s")
    print(f"  sizes 8-bit / float32 (MiB): onnx {mib(quant_path):.1f} / {mib(single_path):.1f}, "
          f"artifact {mib(quant_artifact):.1f} / {mib(single_artifact):.1f}")


def main():
    parser, args = parse_arguments(__doc__.splitlines()[0],
                                   "resnet18:static,mobilenet_v3_small:static-pc,bert:dynamic,bert:static")
    with work_root(args.keep, "quant_bench.") as root:
        for spec in args.models.split(","):
            model, _, mode = spec.partition(":")
            if mode not in MODES:
                parser.error(f"{spec}: mode must be one of {', '.join(MODES)}")
            bench(model, mode, args, root)

if __name__ == "__main__":
    os.environ.pop("FLOWC_SOCKET", None)
    main()
