#!/usr/bin/env python3
"""Transformer families beyond BERT and GPT-2 (two-block models from
examples/export_transformer_families.py) next to onnxruntime, same run,
same thread count. Prints figures; asserts nothing.

    .venv/bin/python bench/family_bench.py [--models roberta,t5,...] [--runs 50]
        [--threads 2] [--opt 3]

For each model: the export (batch 2, via .venv-export), `flowc compile` at
-O<opt> (wall time), `flowc run --bench` (median of --runs), and
onnxruntime's median over as many runs on the same file. Outputs are
compared first (max relative error, as the tests measure it).
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gather_bench import onnxruntime_median  # noqa: E402
from hostinfo import cpu_line  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
FLOWC = ROOT / "build" / "bin" / "flowc"
FAMILIES = "roberta,t5,llama,opt,bloom,mobilebert,deberta,whisper,swin"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=FAMILIES)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--opt", default="3")
    args = parser.parse_args()
    print(cpu_line())
    print(f"two-block models, batch 2, -O{args.opt}, {args.threads} threads, "
          f"median of {args.runs} runs")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory() as work:
        work = pathlib.Path(work)
        subprocess.run([ROOT / ".venv-export" / "bin" / "python",
                        ROOT / "examples" / "export_transformer_families.py", work,
                        "--models", args.models], check=True, capture_output=True)
        for name in args.models.split(","):
            model, artifact = work / f"{name}.onnx", work / f"{name}.fca"
            x = np.load(work / f"{name}_input.npy")
            start = time.perf_counter()
            subprocess.run([FLOWC, "--cache-dir", work / "cache", "compile", model, "-o",
                            artifact, "-O", args.opt], check=True, capture_output=True, env=env)
            compile_s = time.perf_counter() - start
            ran = subprocess.run([FLOWC, "run", artifact, "--input",
                                  f"input={work / f'{name}_input.npy'}", "--bench",
                                  str(args.runs), "--threads", str(args.threads), "--json",
                                  "--output-dir", work / name],
                                 check=True, capture_output=True, text=True, env=env)
            flowc_ms = json.loads(ran.stdout)["median_ms"]
            ort_ms, expected = onnxruntime_median(model, {"input": x}, args.runs, args.threads)
            ours = np.load(work / name / "hidden_states.npy")
            error = float(np.max(np.abs(ours - expected)) / max(np.max(np.abs(expected)), 1e-30))
            print(f"{name:<11} compile {compile_s:5.1f} s  flowc {flowc_ms:8.3f} ms  "
                  f"onnxruntime {ort_ms:8.3f} ms  flowc/onnxruntime time "
                  f"{flowc_ms / ort_ms:5.2f}x  (max relative error {error:.1e})")


if __name__ == "__main__":
    main()
