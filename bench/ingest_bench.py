#!/usr/bin/env python3
"""ONNX ingest figures: flowc's ingest (`ingest_bench`: parse, import, hash
every weight; then again with the weights put into a fresh cache) next to
Python's `onnx.load` (external data loaded, as users call it) on the same
files in the same run. Every measurement is a fresh child process, so peaks
never mix. Peak RSS is the child's own high-water mark (VmHWM, read by the
child at its end: a child's ru_maxrss would include the pages of the
process that forked it). Prints figures; asserts nothing.

    .venv/bin/python bench/ingest_bench.py [--dir /tmp/flowc-ingest-bench]
        [--inline-gb 1.9] [--external-gib 12] [--external-files 4]
        [--pages warm|cold] [--bin build/bin/ingest_bench] [--keep]
        [REAL_MODEL.onnx ...]

Synthetic models (generated into --dir, removed at the end unless --keep;
kept ones are reused when their parameters match):
- inline: a chain of MatMul + Add on float32 with every initializer inline
  (raw_data) in one file just below protobuf's 2 GiB cap, written field by
  field so that the generator never holds it in memory;
- external: the same chain with 8192 x 8192 weights in --external-files
  data files, several tensors per file at offsets (page-aligned in even
  files, unaligned in odd ones), biases inline.

The page cache cannot be dropped reliably without root: before each
measurement the files are read once (--pages warm, the default) or advised
out of the page cache (--pages cold, best effort: POSIX_FADV_DONTNEED), and
the share actually resident (`fincore`) is printed next to the figure.
"""
import argparse
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
GIB = 1 << 30
MIB = 1 << 20
# Below protobuf's 2 GiB message cap, with room for the graph around it.
PROTOBUF_CAP = 2 * GIB - 16 * MIB

ONNX_LOAD_CHILD = r"""
import json, sys, time
def hwm_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
import onnx
baseline = hwm_mib()
start = time.perf_counter()
model = onnx.load(sys.argv[1])
seconds = time.perf_counter() - start
print(json.dumps({"load_s": seconds, "baseline_rss_mib": baseline,
                  "peak_rss_mib": hwm_mib(), "initializers": len(model.graph.initializer)}))
"""


# Synthetic data -------------------------------------------------------------

class Weights:
    """Pseudo-random finite float32 bytes, unique per chunk (no dedup), fast:
    one random pool XOR a per-chunk key that leaves the exponents alone."""

    def __init__(self, seed, chunk_bytes=16 * MIB):
        rng = np.random.default_rng(seed)
        raw = rng.bit_generator.random_raw(chunk_bytes // 8).view(np.uint32)
        # Sign and mantissa random, exponent fixed: values in ±[2^-7, 2^-6).
        self.pool = ((raw & np.uint32(0x807FFFFF)) | np.uint32(0x3C000000)).view(np.uint64)
        self.out = np.empty_like(self.pool)
        self.counter = seed << 32

    def write(self, f, nbytes):
        assert nbytes % 8 == 0
        while nbytes:
            self.counter += 1
            key = (self.counter * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
            np.bitwise_xor(self.pool, np.uint64(key & 0x807FFFFF807FFFFF), out=self.out)
            n = min(nbytes, self.out.nbytes)
            f.write(memoryview(self.out.view(np.uint8))[:n])
            nbytes -= n


def durable(f):
    """Flushes a generated file to disk, so that its dirty pages do not
    slow down the cache's sync in the runs that follow."""
    f.flush()
    os.fsync(f.fileno())


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload_len):
    """Tag and length of a length-delimited field."""
    return varint(number << 3 | 2) + varint(payload_len)


def chain_graph(name, n, layers, weight_tensor):
    """X[1,n] -> (MatMul W_i, Add B_i) x layers -> Y; initializers from
    weight_tensor(name, dims) (without data for the inline writer)."""
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        out = "y" if i == layers - 1 else f"a{i}"
        nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [out]))
        inits += [weight_tensor(f"w{i}", [n, n]), weight_tensor(f"b{i}", [n])]
        prev = out
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="flowc-ingest-bench", ir_version=8)


def write_inline_model(path, total_bytes, seed=1):
    """ModelProto with every initializer's raw_data inline, streamed: the
    graph without initializers is serialized by onnx, the initializers are
    appended field by field (GraphProto.initializer = 5, TensorProto.raw_data
    = 9, ModelProto.graph = 7) with their bytes generated chunk by chunk."""
    n = 4096
    per_layer = 4 * (n * n + n)
    layers = max(1, min(total_bytes, PROTOBUF_CAP) // per_layer)
    headers = []

    def header(name, dims):
        tensor = TensorProto(name=name, dims=dims, data_type=TensorProto.FLOAT)
        headers.append((tensor.SerializeToString(), 4 * int(np.prod(dims))))
        return tensor

    model = chain_graph("inline_chain", n, layers, header)
    del model.graph.initializer[:]
    graph_bytes = model.graph.SerializeToString()
    model.ClearField("graph")
    entries = []
    for tensor_header, data_len in headers:
        tensor_len = len(tensor_header) + len(field(9, data_len)) + data_len
        entries.append((field(5, tensor_len) + tensor_header + field(9, data_len), data_len))
    graph_len = len(graph_bytes) + sum(len(prefix) + data for prefix, data in entries)
    weights = Weights(seed)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
        f.write(field(7, graph_len))
        f.write(graph_bytes)
        for prefix, data_len in entries:
            f.write(prefix)
            weights.write(f, data_len)
        durable(f)
    return sum(data for _, data in entries)


def write_external_model(path, total_bytes, files, seed=2):
    """Weights of 8192 x 8192 float32 in `files` data files next to the
    model, several per file at offsets; biases inline."""
    n = 8192
    layers = max(1, total_bytes // (4 * n * n))
    weights = Weights(seed)
    handles = [open(path.parent / f"{path.stem}.data{k}", "wb") for k in range(files)]
    weight_bytes = 0

    def tensor(name, dims):
        nonlocal weight_bytes
        nbytes = 4 * int(np.prod(dims))
        weight_bytes += nbytes
        if len(dims) == 1:
            buffer = io.BytesIO()
            weights.write(buffer, nbytes)
            return TensorProto(name=name, dims=dims, data_type=TensorProto.FLOAT,
                               raw_data=buffer.getvalue())
        k = int(name[1:]) * files // layers
        f = handles[k]
        # Even files page-align each tensor (as onnx's writer does), odd
        # files pack them at unaligned offsets after a small gap.
        gap = (-f.tell()) % 4096 if k % 2 == 0 else 12
        f.write(b"\0" * gap)
        offset = f.tell()
        weights.write(f, nbytes)
        t = TensorProto(name=name, dims=dims, data_type=TensorProto.FLOAT,
                        data_location=TensorProto.EXTERNAL)
        for key, value in (("location", pathlib.Path(f.name).name),
                           ("offset", str(offset)), ("length", str(nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        return t

    model = chain_graph("external_chain", n, layers, tensor)
    for f in handles:
        durable(f)
        f.close()
    onnx.save_model(model, path)
    return weight_bytes


def generate(scratch, kind, size, files=0):
    """The synthetic model of `kind`, reused if a complete one with the same
    parameters is there."""
    path = scratch / f"{kind}.onnx"
    stamp = scratch / f"{kind}.json"
    params = {"kind": kind, "size": size, "files": files, "version": 1}
    if stamp.exists() and json.loads(stamp.read_text()).get("params") == params:
        print(f"reusing {path}", flush=True)
        return path, json.loads(stamp.read_text())["weight_bytes"]
    stamp.unlink(missing_ok=True)
    print(f"generating {path} ...", flush=True)
    start = time.perf_counter()
    if kind == "inline":
        weight_bytes = write_inline_model(path, size)
    else:
        weight_bytes = write_external_model(path, size, files)
    stamp.write_text(json.dumps({"params": params, "weight_bytes": weight_bytes}))
    print(f"  {weight_bytes / 1e9:.2f} GB of weights in {time.perf_counter() - start:.0f} s",
          flush=True)
    return path, weight_bytes


# Measurement ----------------------------------------------------------------

MODEL_FILES_CHILD = r"""
import json, sys, onnx
model = onnx.load(sys.argv[1], load_external_data=False)
print(json.dumps(sorted({e.value for t in model.graph.initializer
                         for e in t.external_data if e.key == "location"})))
"""


def model_files(path):
    """The model file and the external data files it names (read in a child:
    a model with inline weights would otherwise sit in this process)."""
    out = subprocess.run([sys.executable, "-c", MODEL_FILES_CHILD, str(path)],
                         check=True, capture_output=True, text=True).stdout
    return [pathlib.Path(path)] + [pathlib.Path(path).parent / f for f in json.loads(out)]


def resident_share(files):
    """Share of the files' bytes in the page cache, by `fincore`."""
    resident = total = 0
    for f in files:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw",
                              "--output", "RES,SIZE", str(f)],
                             capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.split():
            return float("nan")
        res, size = map(int, out.stdout.split()[:2])
        resident += res
        total += size
    return resident / total if total else float("nan")


def prepare_pages(files, mode):
    for f in files:
        with open(f, "rb", buffering=0) as handle:
            if mode == "cold":
                os.fsync(handle.fileno())  # only clean pages can be dropped
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                continue
            buffer = bytearray(16 * MIB)
            while handle.readinto(buffer):
                pass
    return resident_share(files)


def run_child(cmd):
    """Runs `cmd` in a fresh process; its JSON output line."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def mem_available_bytes():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def bench_model(name, path, args, scratch):
    files = model_files(path)
    row = {"model": name}

    warm = prepare_pages(files, args.pages)
    ingest = run_child([args.bin, path, "--json"])
    row.update(weight_gb=ingest["weight_bytes"] / 1e9, ingest_s=ingest["ingest_s"],
               ingest_rss=ingest["peak_rss_mib"], ingest_warm=warm, ingest_detail=ingest)

    store_dir = scratch / f"cache-{name}"
    shutil.rmtree(store_dir, ignore_errors=True)
    warm = prepare_pages(files, args.pages)
    try:
        stored = run_child([args.bin, path, "--store", store_dir, "--json"])
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    row.update(store_s=stored["ingest_s"], store_rss=stored["peak_rss_mib"],
               store_warm=warm, store_detail=stored)

    # onnx.load holds every weight in memory (plus a copy of one tensor
    # while it reads it): skip it where that would exhaust this machine.
    need = ingest["weight_bytes"] * 1.1 + 512 * MIB
    if need > mem_available_bytes() - GIB:
        row.update(load_s=None, load_rss=None, load_warm=None,
                   load_note=f"skipped: needs ~{need / GIB:.1f} GiB, "
                             f"{mem_available_bytes() / GIB:.1f} GiB available")
        return row
    warm = prepare_pages(files, args.pages)
    loaded = run_child([sys.executable, "-c", ONNX_LOAD_CHILD, path])
    row.update(load_s=loaded["load_s"], load_rss=loaded["peak_rss_mib"], load_warm=warm,
               load_baseline_rss=loaded["baseline_rss_mib"])
    return row


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"


def print_table(rows):
    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    header = (f"{'model':<14} {'weights GB':>10} | {'flowc ingest s':>14} {'RSS MB':>7} "
              f"{'warm':>5} | {'+store s':>8} {'RSS MB':>7} {'warm':>5} | "
              f"{'onnx.load s':>11} {'RSS MB':>7} {'warm':>5} | {'time ratio':>10} "
              f"{'RSS ratio':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['model']:<14} {r['weight_gb']:>10.3f} | {r['ingest_s']:>14.3f} "
              f"{r['ingest_rss']:>7.0f} {r['ingest_warm']:>5.0%} | {r['store_s']:>8.3f} "
              f"{r['store_rss']:>7.0f} {r['store_warm']:>5.0%} | "
              f"{fmt(r['load_s'], '>11.3f')} {fmt(r['load_rss'], '>7.0f')} "
              f"{fmt(r['load_warm'], '>5.0%')} | "
              f"{ratio(r['load_s'], r['ingest_s']):>10} "
              f"{ratio(r['load_rss'], r['ingest_rss']):>9}")
    print("\nRSS is the child's peak (VmHWM, MiB); warm is the share of the "
          "model's files in the page cache just before the run; ratios are "
          "onnx.load / flowc ingest (without store).")
    for r in rows:
        d, s = r["ingest_detail"], r["store_detail"]
        bound = r["weight_gb"] * 1e9 / GIB / d["sha256_gib_per_cpu_s"]
        print(f"{r['model']}: flowc RSS at start {d['peak_rss_mib_after']['start']:.0f} MiB; "
              f"parse {d['parse_s']:.3f} s, import {d['import_s']:.3f} s, "
              f"hash {d['hash_s']:.3f} s ({d['hash_gib_s']:.2f} GiB/s on {d['cores']} cores, "
              f"CPU {d['hash_cpu_s']:.2f} s vs {bound:.2f} s of sha256 in memory); "
              f"store {s['store_s']:.3f} s ({s['store_gib_s']:.2f} GiB/s, "
              f"CPU {s['store_cpu_s']:.2f} s)"
              + (f"; onnx.load baseline (python + import onnx) "
                 f"{r['load_baseline_rss']:.0f} MiB" if r.get("load_baseline_rss") else "")
              + (f"; onnx.load {r['load_note']}" if r.get("load_note") else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="real ONNX models to bench too")
    parser.add_argument("--dir", default="/tmp/flowc-ingest-bench", type=pathlib.Path)
    parser.add_argument("--inline-gb", type=float, default=1.9,
                        help="weights of the inline model, GB (0: none; capped below 2 GiB)")
    parser.add_argument("--external-gib", type=float, default=12,
                        help="weights of the external-data model, GiB (0: none)")
    parser.add_argument("--external-files", type=int, default=4)
    parser.add_argument("--pages", choices=["warm", "cold"], default="warm")
    parser.add_argument("--bin", type=pathlib.Path, default=ROOT / "build" / "bin" / "ingest_bench")
    parser.add_argument("--keep", action="store_true",
                        help="keep the generated models (reused by the next run)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows here")
    args = parser.parse_args()
    if not args.bin.exists():
        parser.error(f"{args.bin} not found; build the ingest_bench target or pass --bin")
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"ingest_bench in {args.dir}, {os.cpu_count()} cores, pages {args.pages}", flush=True)

    models = [(pathlib.Path(m).stem, pathlib.Path(m)) for m in args.models]
    generated = []
    if args.inline_gb > 0:
        path, _ = generate(args.dir, "inline", int(args.inline_gb * 1e9))
        models.append(("inline", path))
        generated.append("inline")
    if args.external_gib > 0:
        path, _ = generate(args.dir, "external", int(args.external_gib * GIB),
                           args.external_files)
        models.append(("external", path))
        generated.append("external")

    rows = []
    try:
        for name, path in models:
            print(f"benchmarking {name} ...", flush=True)
            rows.append(bench_model(name, path, args, args.dir))
    finally:
        if not args.keep:
            for kind in generated:
                for f in args.dir.glob(f"{kind}.*"):
                    f.unlink()
    print()
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
