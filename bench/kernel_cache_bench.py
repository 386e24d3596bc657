#!/usr/bin/env python3
"""Kernel cache figures on BERT-base and GPT-2-small (batch 1, seq 128).
Prints figures; asserts nothing.

    .venv/bin/python bench/kernel_cache_bench.py [--keep DIR]

Each figure is one `flowc submit -O 3` (daemon already running): its wall
time, the time of its code generation (from its progress events: lowering,
kernels, LLVM, linking the shared object) and the `kernels:` line it
reports:
- cold compile of BERT on an empty cache, with the loop nests partitioned
  into kernels (the default) and without (`--disable-pass
  flowc-partition-kernels`), and the daemon's peak RSS; peer: onnxruntime's
  InferenceSession creation (its graph optimization) from the same run;
- BERT with one layer edited (the attention scale of layer 0), submitted
  after the original: only the changed kernel compiles;
- GPT-2 submitted after BERT into the same cache: the kernels the two
  models share come from the cache.
"""
import argparse
import dataclasses
import json
import pathlib
import re
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
EXPORT_PYTHON = ROOT / ".venv-export" / "bin" / "python"


def export(models, out_dir):
    missing = [m for m in models if not (out_dir / f"{m}.onnx").exists()]
    if missing:
        subprocess.run([EXPORT_PYTHON, ROOT / "examples" / "export_transformers.py", out_dir,
                        "--models", ",".join(missing), "--batch", "1", "--seq", "128"],
                       check=True, capture_output=True)
    return {m: out_dir / f"{m}.onnx" for m in models}


def edit_first_attention_scale(path, out):
    """Layer 0 divides its attention scores by 7.5 instead of 8: one loop
    nest changes, every other one stays."""
    model = onnx.load(path)
    divisor = next(n for n in model.graph.node
                   if n.op_type == "Div" and "layer.0/attention/self" in n.name).input[1]
    constant = next(n for n in model.graph.node if divisor in n.output)
    value = numpy_helper.to_array(constant.attribute[0].t)
    constant.attribute[0].t.CopyFrom(numpy_helper.from_array(np.full_like(value, 7.5)))
    onnx.save(model, out)
    return out


@dataclasses.dataclass
class Submit:
    seconds: float  # the whole submit: ingest, store, codegen, link
    codegen: float  # lowering and compiling the code alone
    kernels: str

    def __str__(self):
        return f"submit {self.seconds:5.2f} s, codegen {self.codegen:5.2f} s | {self.kernels}"


class Daemon:
    def __init__(self, cache):
        self.flowc = [str(BIN / "flowc"), "--cache-dir", str(cache)]

    def __enter__(self):
        subprocess.run(self.flowc + ["daemon", "start"], check=True, capture_output=True)
        return self

    def __exit__(self, *exc):
        subprocess.run(self.flowc + ["daemon", "stop"], capture_output=True)

    def submit(self, path, *options):
        start = time.perf_counter()
        result = subprocess.run(self.flowc + ["submit", path, "-o", path.with_suffix(".fca"),
                                              "-O", "3", "--progress", *options],
                                check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        kernels = re.search(r"kernels: (.*)", result.stderr)
        # "[0.418s] codegen: lowering ..." up to "[0.771s] link: artifact".
        stamps = dict((event, float(at)) for at, event in
                      re.findall(r"\[([0-9.]+)s\] (\w+):", result.stderr))
        codegen = stamps["link"] - stamps["codegen"]
        return Submit(seconds, codegen, kernels.group(1) if kernels else "no loop kernels")

    def peak_rss_mib(self):
        status = json.loads(subprocess.run(self.flowc + ["status", "--json"],
                                           capture_output=True, text=True).stdout or "{}")
        if "pid" not in status:
            return float("nan")
        for line in pathlib.Path(f"/proc/{status['pid']}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def ort_session_seconds(path):
    start = time.perf_counter()
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="work directory to keep (exports are reused)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flowc-kernel-bench-") as tmp:
        root = pathlib.Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        models = export(["bert", "gpt2"], root / "models")
        edited = edit_first_attention_scale(models["bert"], root / "models" / "bert_edited.onnx")
        ort_init = ort_session_seconds(models["bert"])
        print("BERT-base s128, -O3:")
        for label, options in (("partitioned", ()),
                               ("whole", ("--disable-pass", "flowc-partition-kernels"))):
            cache = root / f"cache-{label}"
            subprocess.run(["rm", "-rf", cache])
            with Daemon(cache) as daemon:
                cold = daemon.submit(models["bert"], *options)
                rss = daemon.peak_rss_mib()
            print(f"  cold, {label:11s}: {cold} | peak RSS {rss:.0f} MiB | onnxruntime "
                  f"session init {ort_init:.2f} s ({cold.seconds / ort_init:.2f}x)")
        cache = root / "cache-shared"
        subprocess.run(["rm", "-rf", cache])
        with Daemon(cache) as daemon:
            first = daemon.submit(models["bert"])
            edit = daemon.submit(edited)
            print(f"  one layer edited, after the original: {edit} (codegen "
                  f"{first.codegen / edit.codegen:.2f}x faster than the original's cold)")
            cold_gpt2 = root / "cache-gpt2"
            subprocess.run(["rm", "-rf", cold_gpt2])
            with Daemon(cold_gpt2) as alone:
                gpt2_alone = alone.submit(models["gpt2"])
            gpt2_after = daemon.submit(models["gpt2"])
            print("GPT-2-small s128, -O3:")
            print(f"  cold, empty cache: {gpt2_alone}")
            print(f"  cold, after BERT:  {gpt2_after}")

if __name__ == "__main__":
    main()
