#!/usr/bin/env python3
"""Embedding lookups (a run-time Gather of token ids, checked against the
table's range as the graph runs: docs/compiler.md, Run-time checks) next to
onnxruntime, same run, same thread count. Prints figures; asserts nothing.

    .venv/bin/python bench/gather_bench.py [--vocab 30522] [--width 768]
        [--tokens 128] [--batches 1,8] [--runs 200] [--threads 2]

For each batch: a model of one Gather of int64 ids [batch, tokens] into a
[vocab, width] weight (BERT-base's word embeddings by default), compiled with
`flowc compile`, timed with `flowc run --bench` (median), and onnxruntime's
median over the same number of runs. Both outputs are compared first.
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
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from hostinfo import cpu_line  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
FLOWC = ROOT / "build" / "bin" / "flowc"


def embedding_model(vocab, width, batch, tokens, seed=7):
    table = np.random.default_rng(seed).standard_normal((vocab, width), np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0)], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, tokens])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [batch, tokens, width])],
        [numpy_helper.from_array(table, "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def onnxruntime_median(path, feeds, runs, threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        outputs = session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3, outputs[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(cpu_line())
    print(f"Gather of int64 ids [batch, {args.tokens}] into a [{args.vocab}, {args.width}] "
          f"float32 weight, {args.threads} threads, median of {args.runs} runs")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory() as work:
        work = pathlib.Path(work)
        for batch in (int(b) for b in args.batches.split(",")):
            model = work / f"embed_b{batch}.onnx"
            onnx.save(embedding_model(args.vocab, args.width, batch, args.tokens), model)
            ids = np.random.default_rng(batch).integers(
                -args.vocab, args.vocab, (batch, args.tokens), dtype=np.int64)
            np.save(work / "ids.npy", ids)
            artifact = work / f"embed_b{batch}.fca"
            subprocess.run([FLOWC, "compile", model, "-o", artifact], check=True,
                           capture_output=True, env=env)
            ran = subprocess.run([FLOWC, "run", artifact, "--input", f"ids={work / 'ids.npy'}",
                                  "--bench", str(args.runs), "--threads", str(args.threads),
                                  "--json", "--output-dir", work / "out"],
                                 check=True, capture_output=True, text=True, env=env)
            flowc_ms = json.loads(ran.stdout)["median_ms"]
            ort_ms, expected = onnxruntime_median(model, {"ids": ids}, args.runs, args.threads)
            error = float(np.max(np.abs(np.load(work / "out" / "rows.npy") - expected)))
            print(f"batch {batch}: flowc {flowc_ms:.4f} ms, onnxruntime {ort_ms:.4f} ms, "
                  f"flowc/onnxruntime time {flowc_ms / ort_ms:.2f}x "
                  f"(max abs difference {error:g})")


if __name__ == "__main__":
    main()
