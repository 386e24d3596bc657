#!/usr/bin/env python3
"""Real-model latency: flowc next to onnxruntime, OpenVINO, IREE, torch eager
and TorchScript (frozen), same run, same thread count. Prints figures;
asserts nothing.

    bench/setup-peers.sh        # once: .venv-bench with PyPI torch, onnxruntime, OpenVINO, IREE
    .venv-bench/bin/python bench/model_bench.py
        [--models resnet50,mobilenet_v3_small,efficientnet_b0,densenet121,bert,gpt2,resnet50_bn]
        [--batches 1,8] [--runs 20] [--rounds 3] [--threads 2]
        [--peers onnxruntime,openvino,iree,torch]
        [--precision fp32|bf16] [--json results.json] [--keep DIR]

For each model and batch size: the ONNX export (Debian's torch, as the tests
use; any torchvision model name works), a cold `flowc submit` (fresh cache
and daemon: wall time and the daemon's peak RSS), `flowc run --bench`
(median and p90 of --runs timed runs after warm-up), and the peers. Timing
is interleaved: in each of --rounds rounds flowc and every peer time --runs
runs in turn, and each reports the median of its rounds, so a machine whose
speed drifts (a shared VM: one model's ratio moved from 0.77x to 1.23x
between two runs timed one peer after another) slows all of them alike.
The peers:
  onnxruntime  on the same file (CPU provider, intra-op threads = --threads);
  openvino     on the same file: compile_model on CPU (f32, LATENCY hint, one
               stream, --threads inference threads; its compile time includes
               reading the ONNX file), then one InferRequest with its inputs
               set once, `infer()` timed;
  iree         `iree-import-onnx` (upgraded to opset 17) and `iree-compile`
               for llvm-cpu on the host CPU (the compile time is
               iree-compile's), then `iree-benchmark-module` on local-task
               with --threads worker groups, one call per repetition; an
               import, compile or run failure prints `iree: failed (...)`
               and the row goes on;
  torch        the same architecture in PyPI's torch (eager under
               inference_mode, and traced + frozen TorchScript) with its own
               random weights: latency does not depend on weight values.
--peers picks which run; onnxruntime is still the reference of the error
checks when its timing is skipped.
`resnet50_bn` is ResNet-50 exported with its BatchNormalization nodes kept:
the submit's derived-weight line (BatchNorm folded at link) is printed. The
flowc, OpenVINO and IREE outputs are checked against onnxruntime's (max
relative error). "first run": time to the first answer in a fresh session
(flowc: artifact open, session, first run, from `flowc run --json`;
onnxruntime: session creation and first run).
Ratios are peer / flowc: above 1 means flowc is faster. A markdown table of
the main figures closes the run.
"""
import argparse
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "bench"))
from hostinfo import cpu_line  # noqa: E402
from timing import median_p90  # noqa: E402

# The exporters' interpreters: .venv-export (transformers over Debian's
# torch) and Debian's python3 (torchvision); BENCH_EXPORT_PYTHON names one
# interpreter with both, as on a GPU machine with its own torch
# (scripts/gpu-check.sh).
EXPORT_PYTHON = os.environ.get("BENCH_EXPORT_PYTHON", str(ROOT / ".venv-export" / "bin" / "python"))
TORCHVISION_PYTHON = os.environ.get("BENCH_EXPORT_PYTHON", "/usr/bin/python3")
# iree-import-onnx, iree-compile and iree-benchmark-module: the console
# scripts of the IREE wheels, next to the interpreter (.venv-bench/bin).
IREE_BIN = pathlib.Path(sys.executable).parent
# The exports are opset 13; IREE's ONNX lowering lacks some ops at that
# opset (densenet121's standalone BatchNormalization fails to legalize), so
# the importer upgrades every model to 17 first.
IREE_OPSET = 17
PEERS = ["onnxruntime", "openvino", "iree", "torch"]
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
            cmd = [TORCHVISION_PYTHON, ROOT / "examples" / "export_torchvision.py", out_dir,
                   "--models", base, "--batch", str(batch)]
            if model != base:
                cmd.append("--keep-batchnorm")
        subprocess.run(cmd, check=True, capture_output=True)
    inputs = {}
    for npy in sorted(out_dir.glob(f"{base}_*.npy")):
        name = npy.stem[len(base) + 1:]
        inputs["input" if name == "input" else name] = npy
    return onnx_path, inputs


def max_rel_error(output, reference):
    return float(np.max(np.abs(output - reference)) / max(np.max(np.abs(reference)), 1e-30))


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


# The most seconds one flowc command of a benchmark may take (None: no
# limit); bench/gpu_bench.py sets it, so that a hung step costs one row.
STEP_TIMEOUT = None


def flowc_compile(onnx_path, work, precision, target="cpu"):
    """A cold submit for `target`: (seconds, daemon peak RSS MiB, derive line,
    artifact)."""
    flowc = [str(BIN / "flowc"), "--cache-dir", str(work / "cache")]
    artifact = work / "model.fca"
    subprocess.run(flowc + ["daemon", "start"], check=True, capture_output=True)
    try:
        start = time.perf_counter()
        submitted = subprocess.run(flowc + ["submit", onnx_path, "-o", artifact, "-O", "3",
                                            "--precision", precision, "--target", target,
                                            "--progress"],
                                   check=True, capture_output=True, text=True,
                                   timeout=STEP_TIMEOUT)
        compile_s = time.perf_counter() - start
        # "[1.576s] derive: 106 derived weights (106 computed, 0 cached)"
        derive = next((line.split("] ", 1)[1] for line in submitted.stderr.splitlines()
                       if "derive:" in line), "")
        rss = daemon_peak_rss_mib(flowc)
    finally:
        subprocess.run(flowc + ["daemon", "stop"], capture_output=True)
    return compile_s, rss, derive, artifact


def flowc_run(artifact, inputs, feeds_names, work, runs, threads, extra=(), cache_dir=None,
              report=None):
    """One `flowc run --bench` (with `extra` options, on the cache `cache_dir`
    when given): ((median, p90), first run ms, first output). `report`, a
    dict, gets the run's whole --json answer."""
    args = list(extra)
    for name, path in inputs.items():
        args += ["--input", f"{feeds_names[name]}={path}"]
    cache = ["--cache-dir", str(cache_dir)] if cache_dir else []
    out = subprocess.run([str(BIN / "flowc"), *cache, "run", artifact, *args, "--output-dir",
                          work / "out", "--bench", str(runs), "--threads", str(threads),
                          "--json"], check=True, capture_output=True, text=True,
                         timeout=STEP_TIMEOUT).stdout
    result = json.loads(out)
    if report is not None:
        report.update(result)
    output = np.load(result["outputs"][0]["file"])
    return (result["median_ms"], result["p90_ms"]), result["first_run_ms"], output


def openvino_setup(onnx_path, feeds, threads):
    """(compile seconds, an InferRequest with its inputs set, first output)."""
    import openvino
    start = time.perf_counter()
    compiled = openvino.Core().compile_model(str(onnx_path), "CPU", {
        # The CPU plugin runs bf16 by default where the ISA has it (AMX,
        # AVX512-BF16): f32 like the other peers (and flowc's fp32).
        "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": threads,
        # One stream, as one session of the other peers: what LATENCY
        # picks on one socket, said outright since an explicit property
        # outranks the hint.
        "NUM_STREAMS": 1})
    compile_s = time.perf_counter() - start
    request = compiled.create_infer_request()
    for name, value in feeds.items():
        request.set_tensor(name, openvino.Tensor(value))
    request.infer()
    return compile_s, request, request.get_output_tensor(0).data.copy()


def first_error_line(stderr):
    """The diagnostic, without its 'file:line:col: ' prefix, for a one-line
    report."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    line = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "?")
    return re.sub(r"^\S+:\d+:\d+: ", "", line)[:200]


def iree_entry_point(mlir):
    """The imported graph's public function (torch exports: `torch_jit`,
    `main_graph`): the first `func.func @name(` in the file, which comes
    before the weight blobs."""
    with open(mlir) as f:
        for line in f:
            found = re.search(r"func\.func @([\w$.-]+)\(", line)
            if found:
                return found.group(1)
    raise RuntimeError(f"no public function in {mlir}")


def iree_benchmark_ms(tool_args, work, runs):
    """Median and p90 over --runs repetitions of one call each (after
    warm-up), as median_p90 times the in-process peers."""
    out = work / "iree-benchmark.json"
    subprocess.run([IREE_BIN / "iree-benchmark-module", *tool_args,
                    f"--benchmark_repetitions={runs}", "--benchmark_min_time=1x",
                    "--benchmark_min_warmup_time=0.1",
                    f"--benchmark_out={out}", "--benchmark_out_format=json"],
                   check=True, capture_output=True, text=True)
    unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    samples = sorted(b["real_time"] * unit[b["time_unit"]]
                     for b in json.loads(out.read_text())["benchmarks"]
                     if b.get("run_type") == "iteration")
    return samples[len(samples) // 2], samples[len(samples) * 9 // 10]


def iree_setup(onnx_path, ordered_inputs, output_count, work, threads):
    """(import s, compile s, iree-benchmark-module's arguments, first
    output), or the first line of the error when a step fails: IREE does not
    lower every model."""
    mlir, vmfb = work / "model.mlir", work / "model.vmfb"
    try:
        start = time.perf_counter()
        subprocess.run([IREE_BIN / "iree-import-onnx", onnx_path, "--opset-version",
                        str(IREE_OPSET), "-o", mlir], check=True, capture_output=True, text=True)
        import_s = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run([IREE_BIN / "iree-compile", "--iree-hal-target-device=local",
                        "--iree-hal-local-target-device-backends=llvm-cpu",
                        "--iree-llvmcpu-target-cpu=host", mlir, "-o", vmfb],
                       check=True, capture_output=True, text=True)
        compile_s = time.perf_counter() - start
        # physical_cores topology (the default mode) with at most --threads
        # groups: one worker thread per group.
        tool_args = ["--device=local-task", f"--task_topology_max_group_count={threads}",
                     f"--module={vmfb}", f"--function={iree_entry_point(mlir)}"]
        tool_args += [f"--input=@{path}" for path in ordered_inputs]
        outputs = [work / f"iree-output{i}.npy" for i in range(output_count)]
        subprocess.run([IREE_BIN / "iree-run-module", *tool_args,
                        *(f"--output=@{path}" for path in outputs)],
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as error:
        return first_error_line(error.stderr or "")
    return import_s, compile_s, tool_args, np.load(outputs[0])


class FirstOutput(torch.nn.Module):
    """A transformer's last hidden state alone: what the ONNX export
    returns, and a plain tensor, which tracing needs. The inputs go by name:
    newer transformers' forward takes them in another order."""

    def __init__(self, net, names):
        super().__init__()
        self.net = net
        self.names = names

    def forward(self, *inputs):
        return self.net(**dict(zip(self.names, inputs)))[0]


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
            names = ("input_ids", "attention_mask")
        else:
            net = transformers.GPT2Model(transformers.GPT2Config(use_cache=False,
                                                                 torchscript=True))
            example = (torch.randint(0, 50257, (batch, SEQ)),)
            names = ("input_ids",)
        net = FirstOutput(net, names)
    else:
        import torchvision
        net = getattr(torchvision.models, model)(weights=None)
        example = (torch.randn(batch, 3, 224, 224),)
    return net.eval(), example


def exported_torch_model(model, inputs):
    """The net flowc compiles, in this interpreter's torch: the export
    script's seeded weights (examples/), with the exported inputs in its
    .npy files (`inputs`: name -> path). Its figures are the peer's on the
    same weights, which matters for numerics: a 16-bit type's error depends
    on them as much as on the implementation."""
    sys.path.insert(0, str(ROOT / "examples"))
    base = architecture(model)
    names = list(inputs)
    tensors = tuple(torch.from_numpy(np.load(inputs[name])) for name in names)
    if base in TRANSFORMERS:
        import export_transformers
        net = export_transformers.LastHiddenState(export_transformers.build(base, 0), names,
                                                  causal=base == "gpt2")
    else:
        import export_torchvision
        net = export_torchvision.build(base, 0)
    return net.eval(), tensors


def torch_timers(model, batch, runs):
    """Timers of eager (under inference_mode) and frozen TorchScript."""
    net, example = torch_model(model, batch)
    with torch.no_grad():
        traced = torch.jit.freeze(torch.jit.trace(net, example, strict=False))

    def eager():
        with torch.inference_mode():
            return median_p90(lambda: net(*example), runs)

    def scripted():
        with torch.no_grad():
            return median_p90(lambda: traced(*example), runs, warmup=5)

    return eager, scripted


def interleaved(timers, rounds):
    """Each timer's (median, p90) over `rounds` rounds in which every timer
    runs once in turn, the median of the rounds' figures: a machine whose
    speed drifts (a shared VM) slows every peer of a round alike, where
    timing one peer after another would charge the drift to whichever ran
    during it."""
    samples = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            samples[name].append(timer())
    return {name: (float(np.median([s[0] for s in runs])),
                   float(np.median([s[1] for s in runs])))
            for name, runs in samples.items()}


def figure(label, ms, flowc_ms):
    """'label   12.34 (1.23x)', or '' for a peer that did not run."""
    return f"  {label} {ms:8.2f} ({ms / flowc_ms:.2f}x)" if ms is not None else ""


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
    # IREE takes its inputs by position: the graph's order, not the files'.
    ordered_inputs = [inputs[name] for name in
                      sorted(inputs, key=lambda name: graph_inputs.index(names[name]))]
    output_count = len(session.get_outputs())
    work = root / f"{model}-b{batch}"
    work.mkdir()
    compile_s, rss, derive, artifact = flowc_compile(onnx_path, work, args.precision)
    # The first run gives the output and the time to the first answer; the
    # timed runs come in the rounds below.
    _, first_run, output = flowc_run(artifact, inputs, names, work, 1, args.threads)
    reference = session.run(None, feeds)[0]
    row = {"model": model, "batch": batch, "threads": args.threads, "precision": args.precision,
           "rounds": args.rounds, "flowc_ms": None, "flowc_p90_ms": None,
           "onnxruntime_ms": None, "openvino_ms": None, "openvino_p90_ms": None,
           "iree_ms": None, "iree_p90_ms": None,
           "torch_eager_ms": None, "torchscript_ms": None,
           "compile_s": compile_s, "compile_peak_rss_mib": rss,
           "openvino_compile_s": None, "iree_import_s": None, "iree_compile_s": None,
           "max_rel_error": max_rel_error(output, reference), "openvino_max_rel_error": None,
           "iree_max_rel_error": None, "iree_error": None,
           "flowc_first_run_ms": first_run, "onnxruntime_first_run_ms": None, "derive": derive}
    timers = {"flowc": lambda: flowc_run(artifact, inputs, names, work, args.runs,
                                         args.threads)[0]}
    if "onnxruntime" in args.peers:
        # Time to the first answer: onnxruntime's session creation (its graph
        # optimization and weight prepacking) and first run, against flowc's
        # artifact open, session creation and first run.
        start = time.perf_counter()
        fresh = ort.InferenceSession(str(onnx_path), session_options,
                                     providers=["CPUExecutionProvider"])
        fresh.run(None, feeds)
        row["onnxruntime_first_run_ms"] = (time.perf_counter() - start) * 1000
        del fresh
        timers["onnxruntime"] = lambda: median_p90(lambda: session.run(None, feeds), args.runs)
    else:
        del session
    if "openvino" in args.peers:
        ov_compile_s, request, ov_output = openvino_setup(onnx_path, feeds, args.threads)
        row.update(openvino_compile_s=ov_compile_s,
                   openvino_max_rel_error=max_rel_error(ov_output, reference))
        timers["openvino"] = lambda: median_p90(request.infer, args.runs)
    if "iree" in args.peers:
        iree = iree_setup(onnx_path, ordered_inputs, output_count, work, args.threads)
        if isinstance(iree, str):
            row["iree_error"] = iree
        else:
            row.update(iree_import_s=iree[0], iree_compile_s=iree[1],
                       iree_max_rel_error=max_rel_error(iree[3], reference))
            timers["iree"] = lambda: iree_benchmark_ms(iree[2], work, args.runs)
    if "torch" in args.peers:
        timers["torch_eager"], timers["torchscript"] = torch_timers(model, batch, args.runs)
    latency = interleaved(timers, args.rounds)
    row.update(flowc_ms=latency["flowc"][0], flowc_p90_ms=latency["flowc"][1])
    if "onnxruntime" in latency:
        row["onnxruntime_ms"] = latency["onnxruntime"][0]
    if "openvino" in latency:
        row.update(openvino_ms=latency["openvino"][0], openvino_p90_ms=latency["openvino"][1])
    if "iree" in latency:
        row.update(iree_ms=latency["iree"][0], iree_p90_ms=latency["iree"][1])
    if "torch_eager" in latency:
        row.update(torch_eager_ms=latency["torch_eager"][0],
                   torchscript_ms=latency["torchscript"][0])
    print_row(row)
    return row


def print_row(row):
    ours = row["flowc_ms"]
    compiles = [f"{row['compile_s']:5.1f} s / {row['compile_peak_rss_mib']:5.0f} MiB"]
    errors = [f"{row['max_rel_error']:.1e}"]
    if row["openvino_ms"] is not None:
        compiles.append(f"ov {row['openvino_compile_s']:.1f} s")
        errors.append(f"ov {row['openvino_max_rel_error']:.1e}")
    if row["iree_ms"] is not None:
        compiles.append(f"iree {row['iree_compile_s']:.1f} s")
        errors.append(f"iree {row['iree_max_rel_error']:.1e}")
    first = f"first run {row['flowc_first_run_ms']:6.1f} ms"
    if row["onnxruntime_first_run_ms"] is not None:
        first += f" (ort {row['onnxruntime_first_run_ms']:6.1f})"
    print(f"{row['model']:>20} b{row['batch']}  flowc {ours:8.2f} ms (p90 {row['flowc_p90_ms']:8.2f})"
          + figure("ort", row["onnxruntime_ms"], ours)
          + figure("ov", row["openvino_ms"], ours)
          + figure("iree", row["iree_ms"], ours)
          + (f"  iree: failed ({row['iree_error']})" if row["iree_error"] else "")
          + figure("eager", row["torch_eager_ms"], ours)
          + figure("ts", row["torchscript_ms"], ours)
          + f"  compile {', '.join(compiles)}  err {', '.join(errors)}  {first}"
          + (f"  [{row['derive']}]" if row["derive"] else ""), flush=True)


def markdown_table(rows):
    """The main figures, to paste into a report."""
    def ms(value, flowc_ms):
        return f"{value:.2f} ({value / flowc_ms:.2f}x)" if value is not None else "-"

    def number(value, spec):
        return format(value, spec) if value is not None else "-"

    lines = ["| model | batch | flowc ms | ort ms (ratio) | OpenVINO ms (ratio) | IREE ms (ratio) "
             "| compile s flowc / OpenVINO / IREE | max rel error vs ort flowc / OpenVINO / IREE |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ours = row["flowc_ms"]
        iree = "failed" if row["iree_error"] else ms(row["iree_ms"], ours)
        lines.append(
            f"| {row['model']} | {row['batch']} | {ours:.2f} | {ms(row['onnxruntime_ms'], ours)} "
            f"| {ms(row['openvino_ms'], ours)} | {iree} "
            f"| {row['compile_s']:.1f} / {number(row['openvino_compile_s'], '.1f')} / "
            f"{number(row['iree_compile_s'], '.1f')} "
            f"| {row['max_rel_error']:.1e} / {number(row['openvino_max_rel_error'], '.1e')} / "
            f"{number(row['iree_max_rel_error'], '.1e')} |")
    return "\n".join(lines)


def versions(peers):
    parts = [f"onnxruntime {ort.__version__}"]
    if "openvino" in peers:
        parts.append(f"openvino {importlib.metadata.version('openvino')}")
    if "iree" in peers:
        parts.append(f"iree {importlib.metadata.version('iree-base-compiler')} "
                     f"(runtime {importlib.metadata.version('iree-base-runtime')})")
    if "torch" in peers:
        parts.append(f"torch {torch.__version__}")
    return ", ".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models",
                        default="resnet50,mobilenet_v3_small,efficientnet_b0,densenet121,bert,gpt2")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds: flowc and each peer time --runs runs "
                             "in turn, and the median of the rounds is reported")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                        help="flowc's precision (the peers stay fp32)")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="the peers to run (torch: eager and TorchScript)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--keep", help="work directory to keep (exports are reused)")
    args = parser.parse_args()
    args.peers = [peer for peer in args.peers.split(",") if peer]
    unknown = set(args.peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown peers {sorted(unknown)}; known: {','.join(PEERS)}")
    torch.set_num_threads(args.threads)
    print(f"{versions(args.peers)}, {args.threads} threads, "
          f"flowc {args.precision}, median of {args.rounds} interleaved rounds of "
          f"{args.runs} runs; ratio = peer / flowc")
    print(cpu_line())
    rows = []
    with tempfile.TemporaryDirectory(prefix="flowc-model-bench-") as tmp:
        root = pathlib.Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        for model in args.models.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                for stale in root.glob(f"{model}-b{batch}"):
                    subprocess.run(["rm", "-rf", stale], check=True)
                rows.append(bench(model, batch, args, root))
    print()
    print(markdown_table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
