#!/usr/bin/env python3
"""Remote submit by upload: bytes sent for a model whose weights the daemon
already holds, and the client's hashing time with a cold and a warm stat
memo. Prints figures; asserts nothing. Not run by CI (4 GB by default).

    .venv/bin/python bench/remote_submit_bench.py [--size-gib 4] [--dir WORKDIR] [--keep]

The model is bench/ingest_bench.py's synthetic external-data chain
(8192 x 8192 float32 MatMul weights in one data file next to the .onnx,
generated once and reused from --dir). On a fresh daemon and cache, over
the unix socket with `flowc submit --upload --thin`:
  1. cold: the daemon has nothing, the client has no memo: everything is
     hashed and uploaded;
  2. the graph changed (a Relu appended, same data file): only the .onnx
     is hashed and uploaded;
  3. the client's memo removed: every file hashed again, nothing uploaded;
  4. unchanged: nothing hashed, nothing uploaded.
Needs about 3x the model's size free under --dir (the model, the uploaded
blob, the cache's per-tensor copy).
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from hostinfo import cpu_line  # noqa: E402
from ingest_bench import generate  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"


def graph_variant(model_path: pathlib.Path) -> pathlib.Path:
    """The same model with a Relu after its output: another graph, the same
    external data file (referred to by the same location)."""
    variant = model_path.with_name(model_path.stem + "_relu.onnx")
    model = onnx.load(model_path, load_external_data=False)
    graph = model.graph
    graph.output[0].name = "y_relu"
    graph.node.append(helper.make_node("Relu", ["y"], ["y_relu"]))
    onnx.save_model(model, variant)
    return variant


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=4.0,
                        help="external weights, GiB (default 4)")
    parser.add_argument("--dir", type=pathlib.Path, help="work directory (kept models)")
    parser.add_argument("--keep", action="store_true", help="keep the cache afterwards")
    args = parser.parse_args()
    work = args.dir or pathlib.Path(tempfile.mkdtemp(prefix="flowc-rsubmit-bench."))
    models = work / "models"
    models.mkdir(parents=True, exist_ok=True)
    model, weight_bytes = generate(models, "external", int(args.size_gib * (1 << 30)), files=1)
    variant = graph_variant(model)
    # The client memoizes no file changed in the last 2 s (a writer may
    # still be at work): a freshly generated model would be hashed twice.
    newest = max(max(p.stat().st_mtime, p.stat().st_ctime) for p in models.iterdir())
    time.sleep(max(0.0, newest + 2.1 - time.time()))
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    base = [str(BIN / "flowc"), "--cache-dir", str(cache), "--socket", str(work / "d.sock")]
    subprocess.run(base + ["daemon", "start"], check=True, capture_output=True)

    def submit(path):
        start = time.perf_counter()
        out = subprocess.run(base + ["submit", str(path), "-o", str(work / "out.fca"),
                                     "--upload", "--thin", "--json"],
                             check=True, capture_output=True, text=True).stdout
        result = json.loads(out)
        result["wall_s"] = time.perf_counter() - start
        return result

    memo = cache / "client" / "upload-hashes.json"
    status = json.loads(subprocess.run(base + ["status", "--json"], check=True,
                                       capture_output=True, text=True).stdout)

    def daemon_peak_mib():
        for line in pathlib.Path(f"/proc/{status['pid']}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    try:
        before = daemon_peak_mib()
        runs = [("cold (nothing anywhere)", submit(model))]
        after = daemon_peak_mib()
        runs.append(("graph changed, same weights", submit(variant)))
        memo.unlink()
        runs.append(("client memo removed", submit(variant)))
        runs.append(("unchanged", submit(variant)))
    finally:
        subprocess.run(base + ["daemon", "stop"], capture_output=True)
    model_bytes = runs[0][1]["model_bytes"]
    print(cpu_line())
    print(f"model: {model_bytes / 1e9:.3f} GB in {runs[0][1]['model_blobs']} files "
          f"({weight_bytes / 1e9:.3f} GB of external weights)")
    print(f"{'submit':<30} {'uploaded':>16} {'blobs':>6} {'hashed':>12} "
          f"{'hash s':>8} {'hash GB/s':>9} {'cache':>6} {'wall s':>8}")
    for name, r in runs:
        rate = (f"{r['hashed_bytes'] / r['hash_seconds'] / 1e9:.2f}"
                if r["hash_seconds"] > 0 and r["hashed_bytes"] > 1e6 else "-")
        print(f"{name:<30} {r['uploaded_bytes']:>16,} {r['uploaded_blobs']:>6} "
              f"{r['hashed_bytes']:>12,} {r['hash_seconds']:>8.3f} {rate:>9} "
              f"{r['cache']:>6} {r['wall_s']:>8.2f}")
    print(f"daemon peak RSS (VmHWM): {before:.0f} MiB before the cold upload, "
          f"{after:.0f} MiB after it")
    changed = runs[1][1]["uploaded_bytes"]
    print(f"graph change: {changed:,} bytes sent of {model_bytes:,} "
          f"({changed / model_bytes:.2e} of the model)")
    if not args.keep:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
