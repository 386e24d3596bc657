#!/usr/bin/env python3
"""Transformer families beyond BERT and GPT-2 (two-block models from
examples/export_transformer_families.py), image and audio decoders
(examples/export_decoders.py), torchvision's video models
(examples/export_torchvision.py) and recurrent models
(examples/export_recurrent.py) next to onnxruntime, same run, same
thread count. Prints figures; asserts nothing.

    .venv/bin/python bench/family_bench.py [--models roberta,t5,...]
        [--decoders dcgan,unet,...] [--video r3d_18,...]
        [--recurrent lstm_classifier,...] [--runs 50] [--threads 2] [--opt 3]

For each model: the export (transformers at batch 2 via .venv-export,
decoders, video and recurrent models via Debian's torch; an empty list
skips its kind), `flowc compile` at
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
DECODERS = "dcgan,unet,style,espcn,groupnorm,audio"
VIDEO = "r3d_18,mc3_18,r2plus1d_18"
RECURRENT = "lstm_classifier,gru_tagger,rnn_relu,lstm_states,lstm_speech"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=FAMILIES)
    parser.add_argument("--decoders", default=DECODERS)
    parser.add_argument("--video", default=VIDEO)
    parser.add_argument("--recurrent", default=RECURRENT)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--opt", default="3")
    args = parser.parse_args()
    print(cpu_line())
    print(f"-O{args.opt}, {args.threads} threads, median of {args.runs} runs")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    kinds = [(ROOT / ".venv-export" / "bin" / "python", "export_transformer_families.py",
              args.models, "hidden_states"),
             ("/usr/bin/python3", "export_decoders.py", args.decoders, "output"),
             ("/usr/bin/python3", "export_torchvision.py", args.video, "logits"),
             ("/usr/bin/python3", "export_recurrent.py", args.recurrent, "output")]
    with tempfile.TemporaryDirectory() as work:
        work = pathlib.Path(work)
        for python, exporter, names, output in kinds:
            if names:
                subprocess.run([python, ROOT / "examples" / exporter, work, "--models", names],
                               check=True, capture_output=True)
                for name in names.split(","):
                    measure(work, name, output, args, env)


def measure(work, name, output, args, env):
    """Compiles, times and checks one exported model; prints its row."""
    model, artifact = work / f"{name}.onnx", work / f"{name}.fca"
    # <name>_<input>.npy per input (the recurrent models take several), the
    # data first: its shape is the row's.
    feeds = {path.stem[len(name) + 1:]: np.load(path)
             for path in sorted(work.glob(f"{name}_*.npy"),
                                key=lambda p: (p.stem[len(name) + 1:] not in ("input", "tokens"),
                                               p.name))}
    start = time.perf_counter()
    subprocess.run([FLOWC, "--cache-dir", work / "cache", "compile", model, "-o", artifact,
                    "-O", args.opt], check=True, capture_output=True, env=env)
    compile_s = time.perf_counter() - start
    inputs = [arg for input_name in feeds
              for arg in ("--input", f"{input_name}={work / f'{name}_{input_name}.npy'}")]
    ran = subprocess.run([FLOWC, "run", artifact, *inputs, "--bench", str(args.runs),
                          "--threads", str(args.threads), "--json", "--output-dir", work / name],
                         check=True, capture_output=True, text=True, env=env)
    flowc_ms = json.loads(ran.stdout)["median_ms"]
    ort_ms, expected = onnxruntime_median(model, feeds, args.runs, args.threads)
    ours = np.load(work / name / f"{output}.npy")
    x = next(iter(feeds.values()))
    error = float(np.max(np.abs(ours - expected)) / max(np.max(np.abs(expected)), 1e-30))
    print(f"{name:<15} {str(list(x.shape)):<16} compile {compile_s:5.1f} s  "
          f"flowc {flowc_ms:8.3f} ms  onnxruntime {ort_ms:8.3f} ms  "
          f"flowc/onnxruntime time {flowc_ms / ort_ms:5.2f}x  (max relative error {error:.1e})")


if __name__ == "__main__":
    main()
