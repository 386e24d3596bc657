"""kill -9 of the daemon at random points during a stream of ingests never
leaves a partial blob visible or an index row without its blob: after each
restart (which reconciles orphans) `flowc cache verify` finds nothing wrong.
"""
import json
import os
import random
import signal
import subprocess
import time

import numpy as np
import onnx
from onnx import numpy_helper

import make_models
from conftest import BIN, Flowc, assert_close, onnxruntime_outputs, save

KILLS = int(os.environ.get("FLOWC_CRASH_KILLS", "100"))


class Daemon:
    """flowcd in the foreground, so that the test can SIGKILL it."""

    def __init__(self, flowc: Flowc):
        self.flowc = flowc
        self.process = None

    def start(self):
        log = open(self.flowc.tmp / "flowcd.log", "a")
        self.process = subprocess.Popen(
            [BIN / "flowcd", "--cache-dir", self.flowc.cache_dir, "--socket", self.flowc.socket],
            stdout=log, stderr=log)
        for _ in range(400):
            if self.flowc.run("status", "--json", check=False).stdout.find('"running":true') >= 0:
                return
            time.sleep(0.02)
        raise AssertionError("flowcd did not start")

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)


def variant(template: onnx.ModelProto, rng, path):
    """The template with fresh weights: every submit has blobs to write."""
    model = onnx.ModelProto()
    model.CopyFrom(template)
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(
            rng.standard_normal(array.shape).astype(np.float32) * 0.3, init.name))
    onnx.save(model, path)
    return path


def test_kill_9_at_random_points_never_corrupts_the_cache(tmp_path):
    flowc = Flowc(tmp_path)
    daemon = Daemon(flowc)
    rng = np.random.default_rng(1234)
    timing = random.Random(1234)
    # Two graphs: weight-only variants re-link (fast), new graphs recompile.
    templates = [make_models.make_cnn(rng), make_models.make_mlp(rng)]
    # A 4 MiB weight makes large (file) blobs as well as inline ones.
    big = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1024])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1024])],
        [numpy_helper.from_array(np.zeros((1024, 1024), np.float32), "w")]),
        opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    templates.append(big)

    daemon.start()
    interrupted = 0
    try:
        for kill in range(KILLS):
            path = variant(templates[kill % 3], rng, tmp_path / f"m{kill}.onnx")
            submit = subprocess.Popen(
                [BIN / "flowc", "--cache-dir", flowc.cache_dir, "--socket", flowc.socket,
                 "submit", path, "-o", tmp_path / "out.fca", "--json"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "FLOWC_AUTOSTART": "0"})
            time.sleep(timing.uniform(0.0, 0.12))
            daemon.kill()
            interrupted += submit.wait(timeout=60) != 0
            daemon.start()  # reconciles what the crash left
            report = json.loads(flowc.run("cache", "verify", "--json", check=False).stdout)
            assert report["ok"], f"after kill {kill}: {report}"
            leftovers = [p.name for p in (flowc.cache_dir / "tmp").iterdir()]
            assert not leftovers, f"after kill {kill}: temp files {leftovers}"
        print(f"{KILLS} kills, {interrupted} of them interrupted a submit")
        # The cache still works end to end.
        x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        model = save(make_models.make_cnn(rng), tmp_path / "final.onnx")
        flowc.submit(model)
        ours = flowc.execute(model.with_suffix(".fca"), {"image": x})
        assert_close(ours["probs"], onnxruntime_outputs(model, {"image": x})["probs"])
        stats = json.loads(flowc.run("cache", "stats", "--json").stdout)
        assert stats["blobs"] > 0
    finally:
        daemon.stop()
