#!/usr/bin/env python3
"""The CUDA target on a GPU: each model compiled for a cuda target, run on
the GPU, its output checked against onnxruntime on the CPU, and its latency
set against torch eager on the same GPU, in fp32 and with AMP. Prints a
table; exits 1 when an error exceeds its bound (fp32: 1e-3 relative, AMP:
1e-2; an AMP row also passes within 1.25x of torch autocast's own error on
the same weights when that is above the bound), 5 when there is no GPU.

    .venv-bench/bin/python bench/gpu_bench.py [--target cuda:sm_90]
        [--models cnn,mlp,resnet50,bert,gpt2] [--batches 1,8]
        [--precisions fp32,fp16] [--runs 20] [--keep DIR]

scripts/gpu-check.sh runs it after the build and the GPU unit tests. `cnn`
and `mlp` are examples/make_models.py's models (batch 1 only); the others
are exported as bench/model_bench.py exports them. The flowc figure is
`flowc run --bench` (median of --runs timed runs after warm-up, each run
synchronized: inputs copied to the device, the graph, outputs copied back);
torch eager's is the same architecture with its own random weights under
inference_mode on the GPU, synchronized after each call, inputs already on
the device; its AMP figure runs under torch.autocast with the same 16-bit
type as flowc's --precision. In fp32, torch's cuDNN convolutions use TF32
tensor cores by default and flowc's fp32 is exact: "torch ms, TF32 off" is
torch with TF32 off (cuDNN and matmul), the like-for-like peer. Ratio =
torch ms / flowc ms: above 1 means flowc is faster. torch AMP error: torch
autocast's output against torch's fp32 output on the weights and inputs
flowc compiled (the export scripts'), the peer's error for that precision.
Search gain = flowc ms with `--gpu-trials 1 --no-gpu-records` (cuDNN's and
cuBLASLt's first choices) / flowc ms with the trial runs' choices. 1st run
ms: the first `flowc run` on a fresh cache (trial runs included, their
timings recorded), then a second one (the records decide: no trials).

--replicas MODELS: on a machine with two GPUs or more of the target's
compute capability, each model (batch 8 at the last precision) also runs
`flowc run --gpu-devices` on all of them: runs per second of all the
devices at once against one device, and the weights' NCCL broadcast
against torch.cuda.comm.broadcast of as many bytes over the same devices
(the peer). With one such GPU it says so and times nothing.
"""
import argparse
import contextlib
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
BOUNDS = {"fp32": 1e-3, "fp16": 1e-2, "bf16": 1e-2}
# An AMP error above its bound passes when torch autocast's own error on the
# same weights is above the bound too and flowc's is within this factor of
# it: some weights lose more than the bound to any 16-bit rounding
# (docs/cuda.md, AMP).
PEER_FACTOR = 1.25


def within_bound(error, torch_error, precision):
    if error <= BOUNDS[precision]:
        return True
    return (precision != "fp32" and torch_error > BOUNDS[precision]
            and error <= PEER_FACTOR * torch_error)


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


def torch_eager(model, batch, runs, precision, tf32=True):
    """torch eager's median ms on the GPU; nan without CUDA. tf32=False:
    with TF32 off, as flowc's fp32 is (torch's cuDNN convolutions use TF32
    tensor cores by default)."""
    import torch
    if not torch.cuda.is_available():
        return float("nan")
    if not tf32:
        with tf32_off():
            return torch_eager(model, batch, runs, precision)
    net, example = model_bench.torch_model(model, batch)
    net = net.cuda()
    example = tuple(t.cuda() for t in example)

    def call():
        net(*example)
        torch.cuda.synchronize()

    with torch.inference_mode(), (autocast("cuda", precision) if precision != "fp32"
                                  else contextlib.nullcontext()):
        return model_bench.median_p90(call, runs)[0]


@contextlib.contextmanager
def tf32_off():
    import torch
    kept = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = kept


def autocast(device, precision):
    import torch
    return torch.autocast(device, dtype=torch.float16 if precision == "fp16" else torch.bfloat16)


def torch_amp_error(model, inputs, precision):
    """torch autocast's max relative error against its own fp32 output, on
    the weights and inputs flowc compiled (model_bench.exported_torch_model),
    on the GPU when there is one: the peer's figure for the AMP bound."""
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    net, example = model_bench.exported_torch_model(model, inputs)
    net = net.to(device)
    example = tuple(t.to(device) for t in example)
    with torch.inference_mode():
        exact = net(*example).float()
        with autocast(device, precision):
            rounded = net(*example).float()
    return float((rounded - exact).abs().max() / exact.abs().max())


def bench(model, batch, precision, target, args, root):
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"{model}-b{batch}-{precision}-", dir=root))
    if model in EXAMPLES:
        onnx_path, inputs = example_model(model, root)
    else:
        onnx_path, inputs = model_bench.export(model, batch, root / "models" / f"b{batch}")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds_names = {key: names[0] if key == "input" else key for key in inputs}
    feeds = {feeds_names[key]: np.load(path) for key, path in inputs.items()}
    reference = session.run(None, feeds)[0]
    compile_s, _, _, artifact = model_bench.flowc_compile(onnx_path, work, precision, target)
    # The compile's cache, fresh: the first session runs the trials and
    # records them, the second finds the records.
    cache = work / "cache"
    report = {}
    (median, _), first, output = model_bench.flowc_run(artifact, inputs, feeds_names, work,
                                                       args.runs, threads=1, cache_dir=cache,
                                                       report=report)
    # How many convolutions' trials chose cuDNN's graph with the epilogue.
    kernels = report.get("gpu_kernels", {})
    fused = f"{kernels.get('fused_epilogues', 0)}/{kernels.get('conv2d', 0)}"
    _, first_recorded, _ = model_bench.flowc_run(artifact, inputs, feeds_names, work, 1,
                                                 threads=1, cache_dir=cache)
    # The search gain: the libraries' first choices against the trial runs'.
    (heuristic, _), _, _ = model_bench.flowc_run(
        artifact, inputs, feeds_names, work, args.runs, threads=1, cache_dir=cache,
        extra=["--gpu-trials", "1", "--no-gpu-records"])
    error = model_bench.max_rel_error(output, reference)
    if args.profile_top:
        print_profile(artifact, inputs, feeds_names, cache, args.profile_top,
                      f"{model} b{batch} {precision}")
    memcheck = "not run"
    if model in args.memcheck.split(",") and batch == 1:
        memcheck = run_memcheck(artifact, inputs, feeds_names, cache,
                                f"{model} b{batch} {precision}")
    torch_ms = torch_exact_ms = torch_error = float("nan")
    if model not in EXAMPLES:
        try:
            torch_ms = torch_eager(model, batch, args.runs, precision)
            if precision == "fp32":
                torch_exact_ms = torch_eager(model, batch, args.runs, precision, tf32=False)
            else:
                torch_error = torch_amp_error(model, inputs, precision)
        except Exception as failure:  # the peer's failure leaves flowc's figures
            print(f"{model} b{batch} {precision}: torch failed: {failure!r}", flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"model": model, "batch": batch, "precision": precision, "compile_s": compile_s,
            "flowc_ms": median, "heuristic_ms": heuristic, "first_run_ms": first,
            "first_run_recorded_ms": first_recorded, "fused": fused,
            "torch_ms": torch_ms, "torch_exact_ms": torch_exact_ms, "error": error,
            "torch_error": torch_error, "memcheck": memcheck,
            "ok": within_bound(error, torch_error, precision) and memcheck != "errors"}


def local_devices(target):
    """The ordinals of this machine's GPUs of `target`'s compute capability."""
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,compute_cap",
                          "--format=csv,noheader"], capture_output=True, text=True,
                         check=True).stdout
    chip = target.split("_")[1]
    fields = [line.split(",") for line in smi.splitlines() if "," in line]
    return [int(index) for index, cap in fields if cap.strip().replace(".", "") == chip]


def torch_broadcast_ms(nbytes, devices, runs):
    """torch.cuda.comm.broadcast of `nbytes` from the first device to all:
    median ms (NCCL's communicator made by a warm-up call first)."""
    import torch
    source = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{devices[0]}")

    def call():
        torch.cuda.comm.broadcast(source, devices)
        for device in devices:
            torch.cuda.synchronize(device)

    call()
    return model_bench.median_p90(call, runs)[0]


def bench_replicas(model, target, args, root):
    """Replicas of `model` on every local GPU of the target's capability."""
    devices = local_devices(target)
    if len(devices) < 2:
        print(f"replicas: {len(devices)} GPU of {target} here; the weights' broadcast "
              "and several devices at once need two", flush=True)
        return
    batch, precision = 8, args.precisions.split(",")[-1]
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"{model}-replicas-", dir=root))
    if model in EXAMPLES:
        onnx_path, inputs = example_model(model, root)
        batch = 1
    else:
        onnx_path, inputs = model_bench.export(model, batch, root / "models" / f"b{batch}")
    names = [i.name for i in ort.InferenceSession(
        str(onnx_path), providers=["CPUExecutionProvider"]).get_inputs()]
    feeds_names = {key: names[0] if key == "input" else key for key in inputs}
    _, _, _, artifact = model_bench.flowc_compile(onnx_path, work, precision, target)

    def run(on):
        out = subprocess.run([str(model_bench.BIN / "flowc"), "--cache-dir",
                              str(work / "cache"), "run", artifact,
                              *input_args(inputs, feeds_names), "--gpu-devices",
                              ",".join(map(str, on)), "--bench", str(args.runs), "--json"],
                             check=True, capture_output=True, text=True,
                             timeout=model_bench.STEP_TIMEOUT).stdout
        return json.loads(out)

    one = run(devices[:1])
    every = run(devices)
    weights = every["weights"]
    peer = torch_broadcast_ms(weights["bytes"], devices, args.runs)
    worst = max(r["max_abs_difference"] for r in every["replicas"])
    print(f"replicas: {model} b{batch} {precision} on {len(devices)} GPUs "
          f"({','.join(map(str, devices))}): {every['runs_per_second']:.1f} runs/s, "
          f"{one['runs_per_second']:.1f} on one "
          f"({every['runs_per_second'] / one['runs_per_second']:.2f}x); outputs differ by "
          f"at most {worst:g}; weights {weights['bytes'] / 2**20:.1f} MiB by "
          f"{weights['method'] or 'none'} in {weights['ms']:.2f} ms (+{weights['setup_ms']:.0f} ms "
          f"setup), torch.cuda.comm.broadcast {peer:.2f} ms ({peer / weights['ms']:.2f}x)",
          flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def input_args(inputs, feeds_names):
    """`flowc run`'s --input arguments of a row's inputs."""
    return [arg for key, path in inputs.items()
            for arg in ("--input", f"{feeds_names[key]}={path}")]


def print_profile(artifact, inputs, feeds_names, cache, top, name):
    """Where a run's time goes: `flowc run --profile`'s heaviest ops, each
    launch synchronized (so the total exceeds a replayed graph's time)."""
    feeds = input_args(inputs, feeds_names)
    ran = subprocess.run([str(model_bench.BIN / "flowc"), "--cache-dir", str(cache), "run",
                          artifact, *feeds, "--profile", "--profile-top", str(top)],
                         capture_output=True, text=True, timeout=model_bench.STEP_TIMEOUT)
    print(f"-- {name}: flowc run --profile --profile-top {top}", flush=True)
    print(ran.stdout if ran.returncode == 0 else f"failed: {ran.stderr.strip()}", flush=True)


def run_memcheck(artifact, inputs, feeds_names, cache, name):
    """One run under compute-sanitizer's memcheck (out-of-bounds and
    misaligned device accesses, with the trial runs' records already in
    `cache`): "clean", "errors", or why it did not run."""
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not pathlib.Path(sanitizer).exists():
        print(f"-- {name}: memcheck skipped: no compute-sanitizer", flush=True)
        return "no compute-sanitizer"
    feeds = input_args(inputs, feeds_names)
    try:
        ran = subprocess.run([sanitizer, "--tool", "memcheck", "--error-exitcode", "9",
                              str(model_bench.BIN / "flowc"), "--cache-dir", str(cache), "run",
                              artifact, *feeds], capture_output=True, text=True,
                             timeout=model_bench.STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        print(f"-- {name}: memcheck timed out", flush=True)
        return "timed out"
    verdict = "clean" if ran.returncode == 0 else "errors"
    print(f"-- {name}: compute-sanitizer --tool memcheck: {verdict}", flush=True)
    if ran.returncode != 0:
        print((ran.stdout + ran.stderr)[-4000:], flush=True)
    return verdict


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="default: the compute capability of GPU 0")
    parser.add_argument("--models", default="cnn,mlp,resnet50,bert,gpt2")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--precisions", default="fp32,fp16",
                        help="fp32 and the AMP types (fp16, bf16) to compile with")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--keep", help="work directory to keep (exports are reused)")
    parser.add_argument("--step-timeout", type=float, default=300,
                        help="seconds one compile or run may take before its row fails")
    parser.add_argument("--profile-top", type=int, default=0,
                        help="also print each row's K heaviest ops (flowc run --profile)")
    parser.add_argument("--memcheck", default="",
                        help="models (comma-separated) whose batch-1 rows also run once "
                             "under compute-sanitizer's memcheck; errors fail the row")
    parser.add_argument("--replicas", default="",
                        help="models (comma-separated) also run on every GPU of the "
                             "target's capability at once (flowc run --gpu-devices)")
    parser.add_argument("--peer-errors", action="store_true",
                        help="only torch autocast's errors on the weights flowc compiles, "
                             "on the GPU or else the CPU (no flowc, no GPU needed)")
    args = parser.parse_args()
    model_bench.STEP_TIMEOUT = args.step_timeout
    if args.peer_errors:
        return peer_errors(args)
    detected, gpu = gpu_target()
    if detected is None:
        print("gpu_bench: no NVIDIA GPU (nvidia-smi found none)", file=sys.stderr)
        return 5
    target = args.target or detected
    print(f"GPU: {gpu} ({detected}); target {target}; -O3: cuDNN, cuBLASLt and flowc's "
          "kernels; precisions " + args.precisions)
    root = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="gpu-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models.split(","):
        for batch in [1] if model in EXAMPLES else map(int, args.batches.split(",")):
            for precision in args.precisions.split(","):
                try:
                    row = bench(model, batch, precision, target, args, root)
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as failure:
                    stderr = failure.stderr or ""
                    if isinstance(stderr, bytes):
                        stderr = stderr.decode(errors="replace")
                    # The error, not a warning printed after it.
                    lines = [line for line in stderr.strip().splitlines()
                             if "warning:" not in line] or [str(failure)]
                    failed = next((line for line in lines if "error" in line), lines[-1])
                    row = {"model": model, "batch": batch, "precision": precision,
                           "ok": False, "failed": failed}
                rows.append(row)
                print_row(row)
    replicas_ok = True
    for model in filter(None, args.replicas.split(",")):
        try:
            bench_replicas(model, target, args, root)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as failure:
            print(f"replicas: {model} failed: {(failure.stderr or failure)!s}"[-2000:],
                  flush=True)
            replicas_ok = False
    print("\n| model | batch | precision | compile s | flowc ms | search gain | "
          "convs fused | 1st run ms: trials / records | torch eager ms | ratio | "
          "torch ms, TF32 off | ratio | max rel error | torch AMP error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        head = f"| {row['model']} | {row['batch']} | {row['precision']} |"
        if "failed" in row:
            print(f"{head} failed: {row['failed']} | | | | | | | | | | |")
            continue
        ratio = row["torch_ms"] / row["flowc_ms"]
        exact_ratio = row["torch_exact_ms"] / row["flowc_ms"]
        gain = row["heuristic_ms"] / row["flowc_ms"]
        print(f"{head} {row['compile_s']:.1f} | {row['flowc_ms']:.3f} | {gain:.2f}x | "
              f"{row['fused']} | {row['first_run_ms']:.0f} / {row['first_run_recorded_ms']:.0f} | "
              f"{row['torch_ms']:.3f} | {ratio:.2f}x | {row['torch_exact_ms']:.3f} | "
              f"{exact_ratio:.2f}x | {row['error']:.1e} | {row['torch_error']:.1e} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(row["ok"] for row in rows) and replicas_ok else 1


def peer_errors(args):
    """What 16-bit rounding alone costs each model's weights: torch
    autocast's error (the AMP bound's context, docs/cuda.md)."""
    import torch
    torch.set_num_threads(min(torch.get_num_threads(), 4))
    root = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="gpu-bench-"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"torch {torch.__version__} autocast on {device}; max relative error against "
          "its fp32 output, on the weights and inputs flowc compiles")
    for model in (m for m in args.models.split(",") if m not in EXAMPLES):
        for batch in map(int, args.batches.split(",")):
            _, inputs = model_bench.export(model, batch, root / "models" / f"b{batch}")
            for precision in (p for p in args.precisions.split(",") if p != "fp32"):
                error = torch_amp_error(model, inputs, precision)
                above = error > BOUNDS[precision]
                print(f"{model} b{batch} {precision}: {error:.2e}"
                      + (f" (above {BOUNDS[precision]:.0e})" if above else ""), flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def print_row(row):
    name = f"{row['model']} b{row['batch']} {row['precision']}"
    if "failed" in row:
        print(f"{name}: FAILED: {row['failed']}", flush=True)
        return
    print(f"{name}: compile {row['compile_s']:.1f} s, flowc "
          f"{row['flowc_ms']:.3f} ms (first run {row['first_run_ms']:.1f} ms), torch eager "
          f"{row['torch_ms']:.3f} ms, max rel error {row['error']:.1e}{bound_note(row)}"
          + (f", memcheck {row['memcheck']}" if row["memcheck"] != "not run" else ""),
          flush=True)


def bound_note(row):
    bound = BOUNDS[row["precision"]]
    if row["error"] <= bound:
        return ""
    peer = f"torch autocast on the same weights: {row['torch_error']:.1e}"
    if row["ok"]:
        return f" (above {bound:.0e}, within {PEER_FACTOR}x of {peer})"
    return f" (ABOVE {bound:.0e}; {peer})"


if __name__ == "__main__":
    sys.exit(main())
