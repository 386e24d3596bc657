#!/usr/bin/env python3
"""Compile time against graph size: elementwise chains and a wide graph.
Prints figures; asserts nothing.

    .venv/bin/python bench/chain_bench.py [--sizes 1000,5000,10000] [--wide 5000]
        [--timeout 300] [--bin-dir build/bin] [--keep DIR]

- chain N: N nodes in a line, cycling Add(h, w_i), Mul(h, s_i), Relu(h) on
  [1, 64] float tensors, each Add and Mul with a weight of its own;
- wide N: about N nodes side by side: branches Relu(Add(x, w_i)) from one
  input, joined by a balanced tree of Adds.

Each model goes through the real CLI (`flowc submit --progress --json`)
against a fresh daemon and cache. Import is the daemon's time from the
`ingest` stage to the `store` stage (parse, import to TOSA, IR and weight
hashing); compile is from the `codegen` stage to the result (lowering,
LLVM, link of the shared object and of the artifact); total is the
client's wall time. A model whose submit runs past --timeout is skipped,
and so is every larger one of its kind.
"""
import argparse
import json
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
WIDTH = 64
OPSET = 17


def _weight(name, rng):
    return numpy_helper.from_array(rng.standard_normal((1, WIDTH)).astype(np.float32), name)


def _model(name, nodes, initializers, output):
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, WIDTH])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def chain_model(count, rng):
    """`count` elementwise nodes in one line."""
    nodes, initializers, previous = [], [], "x"
    for i in range(count):
        out = f"h{i}"
        kind = ("Add", "Mul", "Relu")[i % 3]
        if kind == "Relu":
            nodes.append(helper.make_node("Relu", [previous], [out], name=f"n{i}"))
        else:
            initializers.append(_weight(f"w{i}", rng))
            nodes.append(helper.make_node(kind, [previous, f"w{i}"], [out], name=f"n{i}"))
        previous = out
    return _model(f"chain{count}", nodes, initializers, previous)


def wide_model(count, rng):
    """About `count` nodes: count/3 parallel Add+Relu branches and an Add tree."""
    branches = max(2, count // 3)
    nodes, initializers, level = [], [], []
    for i in range(branches):
        initializers.append(_weight(f"w{i}", rng))
        nodes.append(helper.make_node("Add", ["x", f"w{i}"], [f"a{i}"], name=f"add{i}"))
        nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}"))
        level.append(f"r{i}")
    step = 0
    while len(level) > 1:
        joined = []
        for j in range(0, len(level) - 1, 2):
            out = f"s{step}_{j}"
            nodes.append(helper.make_node("Add", [level[j], level[j + 1]], [out],
                                          name=f"sum{step}_{j}"))
            joined.append(out)
        if len(level) % 2:
            joined.append(level[-1])
        level, step = joined, step + 1
    return _model(f"wide{count}", nodes, initializers, level[0])


def stage_times(stderr):
    """Seconds since the job started at which each progress stage began."""
    times = {}
    for match in re.finditer(r"^flowc: \[([0-9.]+)s\] ([a-z]+):", stderr, re.M):
        times.setdefault(match.group(2), float(match.group(1)))
    return times


def submit(flowc, model_path, timeout):
    """(import s, compile s, total s), or None past `timeout`."""
    start = time.perf_counter()
    try:
        done = subprocess.run(flowc + ["submit", model_path, "-o", model_path.with_suffix(".fca"),
                                       "--progress", "--json"],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    total = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"submit {model_path} failed ({done.returncode}): {done.stderr}")
    result = json.loads(done.stdout)
    stages = stage_times(done.stderr)
    imported = stages["store"] - stages["ingest"]
    compiled = result["daemon_seconds"] - stages["codegen"]
    return imported, compiled, total


def run_case(bin_dir, tmp, kind, count, timeout):
    rng = np.random.default_rng(count)
    model = chain_model(count, rng) if kind == "chain" else wide_model(count, rng)
    nodes = len(model.graph.node)
    case = tmp / f"{kind}{count}"
    case.mkdir()
    path = case / "model.onnx"
    onnx.save(model, path)
    flowc = [str(bin_dir / "flowc"), "--cache-dir", str(case / "cache"), "--socket",
             str(case / "flowcd.sock")]
    subprocess.run(flowc + ["daemon", "start"], check=True, capture_output=True)
    try:
        return nodes, submit(flowc, path, timeout)
    finally:
        # A timed-out compile keeps its daemon busy; stopping it ends the job.
        subprocess.run(flowc + ["daemon", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(case / "cache", ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000",
                        help="chain lengths, comma-separated (50000 is opt-in)")
    parser.add_argument("--wide", default="5000",
                        help="wide-graph node counts, comma-separated ('' for none)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds per model; past it the model and larger ones are skipped")
    parser.add_argument("--bin-dir", type=pathlib.Path, default=ROOT / "build" / "bin",
                        help="directory with flowc and flowcd (another build to compare)")
    parser.add_argument("--keep", type=pathlib.Path,
                        help="write the models under this directory and keep them")
    args = parser.parse_args()
    version = subprocess.run([str(args.bin_dir / "flowc"), "--version"], check=True,
                             capture_output=True, text=True).stdout.strip()
    print(version)
    cases = [("chain", int(n)) for n in args.sizes.split(",") if n]
    cases += [("wide", int(n)) for n in args.wide.split(",") if n]
    print(f"{'model':<12} {'nodes':>7} {'import s':>9} {'compile s':>10} {'total s':>9}"
          f" {'s per 1k nodes':>15}")
    given_up = {}
    with tempfile.TemporaryDirectory(prefix="flowc-chain-") as scratch:
        tmp = args.keep or pathlib.Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        for kind, count in cases:
            label = f"{kind} {count}"
            if kind in given_up and count >= given_up[kind]:
                print(f"{label:<12} skipped: {kind} {given_up[kind]} ran past "
                      f"--timeout {args.timeout:g} s")
                continue
            nodes, figures = run_case(args.bin_dir, tmp, kind, count, args.timeout)
            if figures is None:
                given_up[kind] = count
                print(f"{label:<12} {nodes:>7} past --timeout {args.timeout:g} s, skipped")
                continue
            imported, compiled, total = figures
            print(f"{label:<12} {nodes:>7} {imported:>9.2f} {compiled:>10.2f} {total:>9.2f}"
                  f" {total / nodes * 1000:>15.3f}", flush=True)


if __name__ == "__main__":
    main()
