#!/usr/bin/env python3
"""Selection and scatter ops (TopK, GatherND, ScatterND, ScatterElements,
OneHot: docs/compiler.md, Selection and scatters), and Resize's three modes,
next to onnxruntime, same run, same thread count. Prints figures; asserts
nothing.

    .venv/bin/python bench/selection_bench.py [--runs 200] [--threads 2]
        [--cases top5,top50,...]

Each case is a one-node model at realistic sizes: a classifier's top-5 and
top-50 over 8 rows of 1000 logits, a sampler's top-50 over GPT-2's 50257, a static KV cache [1, 12,
1024, 64] written at a run-time position, the last token's hidden state
picked per sequence, torch's scatter_ of run-time indices, one-hot labels,
and opset 23's Attention with grouped-query heads, and an image upscaled 2x
nearest, linear and cubic. Each is compiled with `flowc compile` and timed with `flowc run
--bench` (median); onnxruntime's median is over the same number of runs.
Each line ends with the largest difference between the two outputs.
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
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def model(node, inputs, outputs, inits=()):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def model23(node, inputs, outputs):
    """`model` at opset 23 (Attention's first)."""
    built = model(node, inputs, outputs)
    built.opset_import[0].version = 23
    built.ir_version = 10
    return built


def ints(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def cases(rng):
    """name -> (what, model, feeds)."""
    logits = rng.standard_normal((8, 1000)).astype(np.float32)
    vocabulary = rng.standard_normal((1, 50257)).astype(np.float32)
    hidden = rng.standard_normal((8, 128, 768)).astype(np.float32)
    scores = rng.standard_normal((64, 512)).astype(np.float32)
    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)

    def resize(mode):
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
        scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
        return (f"Resize {mode} x2 of [1, 3, 224, 224] (an image upscaled)",
                model(node, [("x", FLOAT, [1, 3, 224, 224])], [("y", FLOAT, [1, 3, 448, 448])],
                      [scales]), {"x": image})

    return {
        "resize_nearest": resize("nearest"),
        "resize_linear": resize("linear"),
        "resize_cubic": resize("cubic"),
        "top5": ("TopK k=5 of [8, 1000]",
                 model(helper.make_node("TopK", ["x", "k"], ["v", "i"]),
                       [("x", FLOAT, [8, 1000])], [("v", FLOAT, [8, 5]), ("i", INT64, [8, 5])],
                       [ints("k", [5])]), {"x": logits}),
        "top50": ("TopK k=50 of [8, 1000]",
                  model(helper.make_node("TopK", ["x", "k"], ["v", "i"]),
                        [("x", FLOAT, [8, 1000])],
                        [("v", FLOAT, [8, 50]), ("i", INT64, [8, 50])], [ints("k", [50])]),
                  {"x": logits}),
        "sample50": ("TopK k=50 of [1, 50257] (a sampler over GPT-2's vocabulary)",
                     model(helper.make_node("TopK", ["x", "k"], ["v", "i"]),
                           [("x", FLOAT, [1, 50257])],
                           [("v", FLOAT, [1, 50]), ("i", INT64, [1, 50])], [ints("k", [50])]),
                     {"x": vocabulary}),
        "kv_cache": ("ScatterND of [1, 12, 1, 64] into [1, 12, 1024, 64] at a run-time row",
                     model(helper.make_node("ScatterND", ["cache", "where", "new"], ["y"]),
                           [("cache", FLOAT, [1, 12, 1024, 64]), ("where", INT64, [1, 12, 1, 3]),
                            ("new", FLOAT, [1, 12, 1, 64])], [("y", FLOAT, [1, 12, 1024, 64])]),
                     {"cache": rng.standard_normal((1, 12, 1024, 64)).astype(np.float32),
                      "where": np.array([[[[0, h, 700]] for h in range(12)]], np.int64),
                      "new": rng.standard_normal((1, 12, 1, 64)).astype(np.float32)}),
        "last_token": ("GatherND batch_dims=1 of [8, 1] rows from [8, 128, 768]",
                       model(helper.make_node("GatherND", ["h", "at"], ["y"], batch_dims=1),
                             [("h", FLOAT, [8, 128, 768]), ("at", INT64, [8, 1])],
                             [("y", FLOAT, [8, 768])]),
                       {"h": hidden, "at": rng.integers(0, 128, (8, 1)).astype(np.int64)}),
        "scatter_elements": ("ScatterElements axis=1 of [64, 8] run-time indices into "
                             "[64, 512]",
                             model(helper.make_node("ScatterElements", ["s", "at", "u"], ["y"],
                                                    axis=1),
                                   [("s", FLOAT, [64, 512]), ("at", INT64, [64, 8]),
                                    ("u", FLOAT, [64, 8])], [("y", FLOAT, [64, 512])]),
                             {"s": scores,
                              "at": np.stack([rng.permutation(512)[:8] for _ in range(64)])
                              .astype(np.int64),
                              "u": rng.standard_normal((64, 8)).astype(np.float32)}),
        "attention": ("Attention (opset 23) of [1, 8, 128, 64] queries over 2 key/value "
                      "heads, causal",
                      model23(helper.make_node("Attention", ["q", "k", "v"], ["y"],
                                               is_causal=1),
                              [("q", FLOAT, [1, 8, 128, 64]), ("k", FLOAT, [1, 2, 128, 64]),
                               ("v", FLOAT, [1, 2, 128, 64])], [("y", FLOAT, [1, 8, 128, 64])]),
                      {n: rng.standard_normal(s).astype(np.float32)
                       for n, s in (("q", (1, 8, 128, 64)), ("k", (1, 2, 128, 64)),
                                    ("v", (1, 2, 128, 64)))}),
        "one_hot": ("OneHot of [64] labels, depth 1000",
                    model(helper.make_node("OneHot", ["l", "d", "v"], ["y"]),
                          [("l", INT64, [64])], [("y", FLOAT, [64, 1000])],
                          [ints("d", 1000),
                           numpy_helper.from_array(np.array([0, 1], np.float32), "v")]),
                    {"l": rng.integers(0, 1000, 64).astype(np.int64)}),
    }


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
    names = [o.name for o in session.get_outputs()]
    return float(np.median(times)) * 1e3, dict(zip(names, outputs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", default="top5,top50,sample50,kv_cache,last_token,scatter_elements,"
                                           "one_hot,attention,resize_nearest,resize_linear,"
                                           "resize_cubic")
    args = parser.parse_args()
    print(cpu_line())
    print(f"{args.threads} threads, median of {args.runs} runs; onnxruntime "
          f"{ort.__version__} in the same run")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    every = cases(np.random.default_rng(7))
    with tempfile.TemporaryDirectory() as work:
        work = pathlib.Path(work)
        for name in args.cases.split(","):
            what, graph, feeds = every[name]
            path = work / f"{name}.onnx"
            onnx.save(graph, path)
            artifact = work / f"{name}.fca"
            start = time.perf_counter()
            subprocess.run([FLOWC, "compile", path, "-o", artifact], check=True,
                           capture_output=True, env=env)
            compile_s = time.perf_counter() - start
            command = [FLOWC, "run", artifact, "--bench", str(args.runs), "--threads",
                       str(args.threads), "--json", "--output-dir", work / name]
            for input_name, value in feeds.items():
                np.save(work / f"{name}_{input_name}.npy", value)
                command += ["--input", f"{input_name}={work / f'{name}_{input_name}.npy'}"]
            ran = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
            flowc_ms = json.loads(ran.stdout)["median_ms"]
            ort_ms, expected = onnxruntime_median(path, feeds, args.runs, args.threads)
            error = max(float(np.max(np.abs(np.load(work / name / f"{out}.npy") - value)))
                        for out, value in expected.items())
            print(f"{name:17} {what}: compile {compile_s:.1f} s, flowc {flowc_ms:.4f} ms, "
                  f"onnxruntime {ort_ms:.4f} ms, flowc/onnxruntime {flowc_ms / ort_ms:.2f}x, "
                  f"max abs difference {error:g}")


if __name__ == "__main__":
    main()
