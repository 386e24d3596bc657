#!/usr/bin/env python3
"""The CUDA target on a GPU: each model compiled for a cuda target, run on
the GPU, its output checked against onnxruntime on the CPU, and its latency
set against torch eager on the same GPU. Prints a table; exits 1 when an
error exceeds its bound (fp32: 1e-3 relative), 5 when there is no GPU.

    .venv-bench/bin/python bench/gpu_bench.py [--target cuda:sm_90]
        [--models cnn,mlp,resnet50,bert,gpt2] [--batches 1,8] [--runs 20]
        [--keep DIR]

scripts/gpu-check.sh runs it after the build and the GPU unit tests. `cnn`
and `mlp` are examples/make_models.py's models (batch 1 only); the others
are exported as bench/model_bench.py exports them. The flowc figure is
`flowc run --bench` (median of --runs timed runs after warm-up, each run
synchronized: inputs copied to the device, the graph, outputs copied back);
torch eager's is the same architecture with its own random weights under
inference_mode on the GPU, synchronized after each call, inputs already on
the device. Ratio = torch ms / flowc ms: above 1 means flowc is faster.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "bench"))
import model_bench  # noqa: E402

EXAMPLES = {"cnn", "mlp"}
FP32_BOUND = 1e-3


def gpu_target():
    """cuda:sm_NN of GPU 0, from nvidia-smi; None without a GPU."""
    try:
        cap = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap,name",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return None, None
    capability, name = (field.strip() for field in cap.split(",", 1))
    return "cuda:sm_" + capability.replace(".", ""), name


def example_model(name, work):
    """examples/make_models.py's model and its input."""
    out = work / "examples"
    if not (out / f"{name}.onnx").exists():
        subprocess.run([sys.executable, ROOT / "examples" / "make_models.py", out],
                       check=True, capture_output=True)
    return out / f"{name}.onnx", {"input": out / f"{name}_input.npy"}


def torch_eager_ms(model, batch, runs):
    import torch
    if not torch.cuda.is_available():
        return float("nan")
    net, example = model_bench.torch_model(model, batch)
    net = net.cuda()
    example = tuple(t.cuda() for t in example)

    def call():
        net(*example)
        torch.cuda.synchronize()

    with torch.inference_mode():
        return model_bench.median_p90(call, runs)[0]


def bench(model, batch, target, args, root):
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"{model}-b{batch}-", dir=root))
    if model in EXAMPLES:
        onnx_path, inputs = example_model(model, root)
    else:
        onnx_path, inputs = model_bench.export(model, batch, root / "models" / f"b{batch}")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds_names = {key: names[0] if key == "input" else key for key in inputs}
    feeds = {feeds_names[key]: np.load(path) for key, path in inputs.items()}
    reference = session.run(None, feeds)[0]
    compile_s, _, _, artifact = model_bench.flowc_compile(onnx_path, work, "fp32", target)
    (median, _), first, output = model_bench.flowc_run(artifact, inputs, feeds_names, work,
                                                       args.runs, threads=1)
    error = model_bench.max_rel_error(output, reference)
    torch_ms = float("nan") if model in EXAMPLES else torch_eager_ms(model, batch, args.runs)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"model": model, "batch": batch, "compile_s": compile_s, "flowc_ms": median,
            "first_run_ms": first, "torch_ms": torch_ms, "error": error,
            "ok": error <= FP32_BOUND}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="default: the compute capability of GPU 0")
    parser.add_argument("--models", default="cnn,mlp,resnet50,bert,gpt2")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--keep", help="work directory to keep (exports are reused)")
    args = parser.parse_args()
    detected, gpu = gpu_target()
    if detected is None:
        print("gpu_bench: no NVIDIA GPU (nvidia-smi found none)", file=sys.stderr)
        return 5
    target = args.target or detected
    print(f"GPU: {gpu} ({detected}); target {target}; fp32; -O2: cuDNN, cuBLASLt and "
          "flowc's kernels")
    root = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="gpu-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models.split(","):
        for batch in [1] if model in EXAMPLES else map(int, args.batches.split(",")):
            try:
                row = bench(model, batch, target, args, root)
            except subprocess.CalledProcessError as failure:
                stderr = failure.stderr if isinstance(failure.stderr, str) else ""
                row = {"model": model, "batch": batch, "ok": False,
                       "failed": (stderr.strip().splitlines() or [str(failure)])[-1]}
            rows.append(row)
            print_row(row)
    print("\n| model | batch | compile s | flowc ms | torch eager ms | ratio | max rel error |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if "failed" in row:
            print(f"| {row['model']} | {row['batch']} | failed: {row['failed']} | | | | |")
            continue
        ratio = row["torch_ms"] / row["flowc_ms"]
        print(f"| {row['model']} | {row['batch']} | {row['compile_s']:.1f} | "
              f"{row['flowc_ms']:.3f} | {row['torch_ms']:.3f} | {ratio:.2f}x | "
              f"{row['error']:.1e} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(row["ok"] for row in rows) else 1


def print_row(row):
    if "failed" in row:
        print(f"{row['model']} b{row['batch']}: FAILED: {row['failed']}", flush=True)
        return
    print(f"{row['model']} b{row['batch']}: compile {row['compile_s']:.1f} s, flowc "
          f"{row['flowc_ms']:.3f} ms (first run {row['first_run_ms']:.1f} ms), torch eager "
          f"{row['torch_ms']:.3f} ms, max rel error {row['error']:.1e}"
          f"{'' if row['ok'] else ' (ABOVE ' + str(FP32_BOUND) + ')'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
