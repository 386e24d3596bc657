#!/usr/bin/env python3
"""Save-to-artifact latency of `flowc watch` (docs/watch.md). Prints
figures; asserts nothing.

    .venv/bin/python bench/watch_bench.py [--models cnn,resnet50] [--repeats 3] [--keep DIR]

For the example CNN (examples/make_models.py) and ResNet-50 (torchvision,
exported as tests/e2e/test_torchvision.py does), on a warm daemon with its
own cache: `flowc watch MODEL --json` runs, and each figure is the time
from a save (the rename of the new file over the model, as editors save)
to the watch's `compiled` line, the median of --repeats saves, for
- a weights-only save (every weight new, the same graph): the code is
  reused and the weights re-linked;
- a one-layer edit (the last Relu becomes a LeakyRelu, with another alpha
  each repeat): that layer's code compiles, the rest comes from the caches;
- an unchanged save (the same bytes written again): a cache hit.
Each line also gives the watch's own figures (the compile's seconds, the
kernels compiled / reused). The times include the watch's debounce (150
ms). The peer: onnxruntime's InferenceSession creation for the same model
(what re-running it after a save costs), from the same run.
"""
import argparse
import json
import os
import pathlib
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))
import hostinfo  # noqa: E402
import make_models  # noqa: E402

WAIT_S = 1800


def export_resnet50(out_dir: pathlib.Path) -> pathlib.Path:
    path = out_dir / "resnet50.onnx"
    if not path.exists():
        subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
                        str(out_dir), "--models", "resnet50", "--opset", "17", "--batch", "1"],
                       check=True, capture_output=True, text=True, timeout=WAIT_S)
    return path


def with_weights(template: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """The template with every float weight scaled by a seeded factor near 1."""
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto()
    model.CopyFrom(template)
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype != np.float32:
            continue
        factor = np.float32(1 + 0.01 * rng.standard_normal())
        init.CopyFrom(numpy_helper.from_array(array * factor, init.name))
    return model


def with_last_relu_leaky(model: onnx.ModelProto, alpha: float) -> onnx.ModelProto:
    """The last Relu of the graph becomes LeakyRelu(alpha): one layer's code."""
    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    relu = [n for n in edited.graph.node if n.op_type == "Relu"][-1]
    relu.op_type = "LeakyRelu"
    relu.attribute.append(helper.make_attribute("alpha", alpha))
    return edited


class Watch:
    """`flowc watch MODEL --json`; each stdout line stamped as it arrives."""

    def __init__(self, cache_dir, socket, model, out):
        self.process = subprocess.Popen(
            [str(BIN / "flowc"), "--cache-dir", str(cache_dir), "--socket", str(socket), "watch",
             str(model), "-o", str(out), "--json"], stdout=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put((time.monotonic(), json.loads(line)))
        self.lines.put((time.monotonic(), None))

    def compiled(self):
        """(arrival time, event) of the next `compiled` event."""
        while True:
            at, event = self.lines.get(timeout=WAIT_S)
            if event is None:
                raise SystemExit("flowc watch ended")
            if event["event"] == "error":
                raise SystemExit(f"flowc watch: {event['message']}")
            if event["event"] == "compiled":
                return at, event

    def stop(self):
        self.process.send_signal(2)
        self.process.wait(timeout=60)


def save(path: pathlib.Path, data: bytes) -> float:
    """Writes `data` to a temp file beside `path`, renames it over `path`;
    returns the time of the rename."""
    temp = path.with_name("." + path.name + ".saving")
    temp.write_bytes(data)
    os.replace(temp, path)
    return time.monotonic()


def bench_model(name, template, work, cache_dir, socket, repeats):
    path = work / f"{name}.onnx"
    path.write_bytes(template.SerializeToString())
    watch = Watch(cache_dir, socket, path, work / f"{name}.fca")
    start_at = time.monotonic()
    at, first = watch.compiled()
    print(f"{name}: start compile {at - start_at:.3f} s ({first['result']}, kernels "
          f"{first['kernels_compiled']} compiled / {first['kernels_reused']} reused)", flush=True)
    figures = {"weights-only save": [], "one-layer edit": [], "unchanged save": []}
    for repeat in range(repeats):
        weights = with_weights(template, 100 + repeat)
        steps = [("weights-only save", weights.SerializeToString()),
                 ("one-layer edit", with_last_relu_leaky(weights, 0.05 + 0.01 * repeat)
                  .SerializeToString())]
        steps.append(("unchanged save", steps[-1][1]))
        for kind, data in steps:
            saved = save(path, data)
            at, event = watch.compiled()
            figures[kind].append((at - saved, event))
    watch.stop()
    for kind, samples in figures.items():
        median = statistics.median(s for s, _ in samples)
        last = samples[-1][1]
        print(f"{name}: {kind}: save to artifact {median * 1000:.0f} ms median of {len(samples)} "
              f"({', '.join(f'{s * 1000:.0f}' for s, _ in samples)} ms); {last['result']}, compile "
              f"{statistics.median(e['seconds'] for _, e in samples) * 1000:.0f} ms, kernels "
              f"{last['kernels_compiled']} compiled / {last['kernels_reused']} reused", flush=True)
    creations = []
    for _ in range(repeats):
        begin = time.monotonic()
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        creations.append(time.monotonic() - begin)
    print(f"{name}: peer: onnxruntime {ort.__version__} InferenceSession creation "
          f"{statistics.median(creations) * 1000:.0f} ms median of {repeats}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,resnet50")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=pathlib.Path,
                        help="Keep the exported models and the cache here")
    args = parser.parse_args()
    work = args.keep or pathlib.Path(tempfile.mkdtemp(prefix="flowc-watch-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    cache_dir = work / "cache"
    socket = pathlib.Path(tempfile.mkdtemp(prefix="fw-")) / "flowcd.sock"
    print(hostinfo.cpu_line(), flush=True)
    flowc = [str(BIN / "flowc"), "--cache-dir", str(cache_dir), "--socket", str(socket)]
    subprocess.run(flowc + ["daemon", "start"], check=True, capture_output=True)
    try:
        for name in args.models.split(","):
            if name == "cnn":
                template = make_models.make_cnn(np.random.default_rng(0))
            elif name == "resnet50":
                template = onnx.load(export_resnet50(work))
            else:
                raise SystemExit(f"unknown model '{name}' (cnn, resnet50)")
            bench_model(name, template, work, cache_dir, socket, args.repeats)
    finally:
        subprocess.run(flowc + ["daemon", "stop"], capture_output=True)
        shutil.rmtree(socket.parent, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
