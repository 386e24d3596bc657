#!/usr/bin/env python3
"""Real-model latency: flowc next to onnxruntime, torch eager and TorchScript
(frozen), same run, same thread count. Prints figures; asserts nothing.

    bench/setup-peers.sh        # once: .venv-bench with PyPI torch and onnxruntime
    .venv-bench/bin/python bench/model_bench.py [--models resnet50,mobilenet_v3_small,bert,gpt2,resnet50_bn]
                                                [--batches 1,8] [--runs 20] [--threads 2]
                                                [--precision fp32|bf16] [--json results.json]

For each model and batch size: the ONNX export (Debian's torch, as the tests
use), a cold `flowc submit` (fresh cache and daemon: wall time and the
daemon's peak RSS), `flowc run --bench` (median and p90 of --runs timed runs
after warm-up), onnxruntime on the same file, and the same architecture in
PyPI's torch (eager under inference_mode, and traced + frozen TorchScript)
with its own random weights: latency does not depend on weight values.
`resnet50_bn` is ResNet-50 exported with its BatchNormalization nodes kept:
the submit's derived-weight line (BatchNorm folded at link) is printed. The
flowc output is checked against onnxruntime's (max relative error). "first
run": time to the first answer in a fresh session (flowc: artifact open,
session, first run, from `flowc run --json`; onnxruntime: session creation
and first run).
Ratios are peer / flowc: above 1 means flowc is faster.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
EXPORT_PYTHON = ROOT / ".venv-export" / "bin" / "python"
TRANSFORMERS = {"bert", "gpt2"}
SEQ = 128


def architecture(model):
    """`resnet50_bn` is ResNet-50 exported with its BatchNormalization nodes
    (flowc folds them into derived weights); the peers run the same net."""
    return model.removesuffix("_bn")


def export(model, batch, out_dir):
    """The ONNX file and its input .npy files, exported once per batch size."""
    out_dir = out_dir / model
    out_dir.mkdir(parents=True, exist_ok=True)
    base = architecture(model)
    onnx_path = out_dir / f"{base}.onnx"
    if not onnx_path.exists():
        if base in TRANSFORMERS:
            cmd = [EXPORT_PYTHON, ROOT / "examples" / "export_transformers.py", out_dir,
                   "--models", base, "--batch", str(batch), "--seq", str(SEQ)]
        else:
            cmd = ["/usr/bin/python3", ROOT / "examples" / "export_torchvision.py", out_dir,
                   "--models", base, "--batch", str(batch)]
            if model != base:
                cmd.append("--keep-batchnorm")
        subprocess.run(cmd, check=True, capture_output=True)
    inputs = {}
    for npy in sorted(out_dir.glob(f"{base}_*.npy")):
        name = npy.stem[len(base) + 1:]
        inputs["input" if name == "input" else name] = npy
    return onnx_path, inputs


def median_p90(fn, runs, warmup=3):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[len(samples) * 9 // 10]


def daemon_peak_rss_mib(flowc):
    # A daemon still streaming the last artifact can miss one status call.
    for _ in range(5):
        status = json.loads(subprocess.run(flowc + ["status", "--json"], capture_output=True,
                                           text=True).stdout or "{}")
        if "pid" in status:
            break
        time.sleep(0.5)
    else:
        return float("nan")
    for line in pathlib.Path(f"/proc/{status['pid']}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def flowc_figures(onnx_path, inputs, feeds_names, work, runs, threads, precision):
    flowc = [str(BIN / "flowc"), "--cache-dir", str(work / "cache")]
    artifact = work / "model.fca"
    subprocess.run(flowc + ["daemon", "start"], check=True, capture_output=True)
    try:
        start = time.perf_counter()
        submitted = subprocess.run(flowc + ["submit", onnx_path, "-o", artifact, "-O", "3",
                                            "--precision", precision, "--progress"],
                                   check=True, capture_output=True, text=True)
        compile_s = time.perf_counter() - start
        # "[1.576s] derive: 106 derived weights (106 computed, 0 cached)"
        derive = next((line.split("] ", 1)[1] for line in submitted.stderr.splitlines()
                       if "derive:" in line), "")
        rss = daemon_peak_rss_mib(flowc)
    finally:
        subprocess.run(flowc + ["daemon", "stop"], capture_output=True)
    args = []
    for name, path in inputs.items():
        args += ["--input", f"{feeds_names[name]}={path}"]
    out = subprocess.run(flowc + ["run", artifact, *args, "--output-dir", work / "out",
                                  "--bench", str(runs), "--threads", str(threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    output = np.load(result["outputs"][0]["file"])
    latency = (result["median_ms"], result["p90_ms"])
    return compile_s, rss, latency, result["first_run_ms"], output, derive


class FirstOutput(torch.nn.Module):
    """A transformer's last hidden state alone: what the ONNX export
    returns, and a plain tensor, which tracing needs."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, *inputs):
        return self.net(*inputs)[0]


def torch_model(model, batch):
    """The same architecture in PyPI's torch, and example inputs."""
    torch.manual_seed(0)
    model = architecture(model)
    if model in TRANSFORMERS:
        import transformers
        if model == "bert":
            net = transformers.BertModel(transformers.BertConfig(torchscript=True),
                                         add_pooling_layer=False)
            example = (torch.randint(0, 30522, (batch, SEQ)),
                       torch.ones(batch, SEQ, dtype=torch.int64))
        else:
            net = transformers.GPT2Model(transformers.GPT2Config(use_cache=False,
                                                                 torchscript=True))
            example = (torch.randint(0, 50257, (batch, SEQ)),)
        net = FirstOutput(net)
    else:
        import torchvision
        net = getattr(torchvision.models, model)(weights=None)
        example = (torch.randn(batch, 3, 224, 224),)
    return net.eval(), example


def torch_figures(model, batch, runs):
    net, example = torch_model(model, batch)
    with torch.inference_mode():
        eager = median_p90(lambda: net(*example), runs)
    with torch.no_grad():
        traced = torch.jit.freeze(torch.jit.trace(net, example, strict=False))
        scripted = median_p90(lambda: traced(*example), runs, warmup=5)
    return eager, scripted


def bench(model, batch, args, root):
    onnx_path, inputs = export(model, batch, root / "models" / f"b{batch}")
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = args.threads
    session_options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), session_options,
                                   providers=["CPUExecutionProvider"])
    graph_inputs = [i.name for i in session.get_inputs()]
    # Torchvision exports name their one input "input"; transformer inputs
    # are named as in the graph.
    names = {name: (graph_inputs[0] if name == "input" else name) for name in inputs}
    feeds = {names[name]: np.load(path) for name, path in inputs.items()}
    work = root / f"{model}-b{batch}"
    work.mkdir()
    compile_s, rss, ours, first_run, output, derive = flowc_figures(onnx_path, inputs, names, work,
                                                         args.runs, args.threads,
                                                         args.precision)
    # Time to the first answer: onnxruntime's session creation (its graph
    # optimization and weight prepacking) and first run, against flowc's
    # artifact open, session creation and first run.
    start = time.perf_counter()
    fresh = ort.InferenceSession(str(onnx_path), session_options,
                                 providers=["CPUExecutionProvider"])
    fresh.run(None, feeds)
    ort_first_run = (time.perf_counter() - start) * 1000
    del fresh
    reference = session.run(None, feeds)[0]
    error = float(np.max(np.abs(output - reference)) / max(np.max(np.abs(reference)), 1e-30))
    onnxruntime = median_p90(lambda: session.run(None, feeds), args.runs)
    eager, scripted = torch_figures(model, batch, args.runs)
    row = {"model": model, "batch": batch, "threads": args.threads, "precision": args.precision,
           "flowc_ms": ours[0], "flowc_p90_ms": ours[1], "onnxruntime_ms": onnxruntime[0],
           "torch_eager_ms": eager[0], "torchscript_ms": scripted[0],
           "compile_s": compile_s, "compile_peak_rss_mib": rss, "max_rel_error": error,
           "flowc_first_run_ms": first_run, "onnxruntime_first_run_ms": ort_first_run,
           "derive": derive}
    print(f"{model:>20} b{batch}  flowc {ours[0]:8.2f} ms (p90 {ours[1]:8.2f})  "
          f"ort {onnxruntime[0]:8.2f} ({onnxruntime[0] / ours[0]:.2f}x)  "
          f"eager {eager[0]:8.2f} ({eager[0] / ours[0]:.2f}x)  "
          f"ts {scripted[0]:8.2f} ({scripted[0] / ours[0]:.2f}x)  "
          f"compile {compile_s:5.1f} s / {rss:5.0f} MiB  err {error:.1e}  "
          f"first run {first_run:6.1f} ms (ort {ort_first_run:6.1f})"
          + (f"  [{derive}]" if derive else ""), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v3_small,bert,gpt2")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                        help="flowc's precision (the peers stay fp32)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--keep", help="work directory to keep (exports are reused)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, {args.threads} threads, "
          f"flowc {args.precision}, median of {args.runs} runs; ratio = peer / flowc")
    rows = []
    with tempfile.TemporaryDirectory(prefix="flowc-model-bench-") as tmp:
        root = pathlib.Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        for model in args.models.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                for stale in root.glob(f"{model}-b{batch}"):
                    subprocess.run(["rm", "-rf", stale], check=True)
                rows.append(bench(model, batch, args, root))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
