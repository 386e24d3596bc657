"""`flowc watch`: compile-on-save against the real daemon (docs/watch.md).

Each test starts `flowc watch ... --json` as a subprocess and reads its
events line by line; every wait has a generous overall limit and no test
asserts a duration except the loose save-to-artifact bound of
test_an_edit_compiles_soon_after_the_save (whose figure it prints)."""
import json
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import make_models
from conftest import BIN, assert_close, leaky_cnn, onnxruntime_outputs, save

# The default quiet period (cli/WatchCommand.cpp, docs/watch.md).
DEBOUNCE_S = 0.150
# The loose bound on an edit's save-to-artifact time on a warm daemon (the
# issue asks for 1 s; this machine may be loaded by other builds).
EDIT_BOUND_S = 5.0
WAIT_S = 300


class Watch:
    """A running `flowc watch`: its JSON events, one per stdout line."""

    def __init__(self, flowc, *args, env=None, json_mode=True):
        self.cmd = [str(BIN / "flowc"), "--cache-dir", str(flowc.cache_dir), "--socket",
                    str(flowc.socket), "watch", *map(str, args)] + (["--json"] if json_mode else [])
        self.process = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)
        self.lines = queue.Queue()
        self.stderr = []
        self._readers = [threading.Thread(target=self._read, args=(self.process.stdout, self.lines.put),
                                          daemon=True),
                         threading.Thread(target=self._read, args=(self.process.stderr, self.stderr.append),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()
        self.json_mode = json_mode

    @staticmethod
    def _read(stream, put):
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def line(self):
        """The next stdout line (a dict with --json); fails at the end of the output."""
        try:
            line = self.lines.get(timeout=WAIT_S)
        except queue.Empty:
            raise AssertionError(f"no line from {self.cmd} in {WAIT_S} s; stderr: {self.stderr}")
        assert line is not None, f"flowc watch ended ({self.process.poll()}): {self.stderr}"
        return json.loads(line) if self.json_mode else line

    def event(self, kind):
        """The next event of `kind`, with the events before it."""
        skipped = []
        while True:
            event = self.line()
            if event["event"] == kind:
                return event, skipped
            skipped.append(event)

    def stop(self, sig=signal.SIGINT):
        self.process.send_signal(sig)
        return self.process.wait(timeout=WAIT_S)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def replace(model: onnx.ModelProto, path: pathlib.Path) -> float:
    """Saves `model` over `path` as an editor does (temp file + rename);
    returns when the rename was done (time.monotonic())."""
    temp = path.with_name("." + path.name + ".tmp")
    onnx.save(model, temp)
    os.replace(temp, path)
    return time.monotonic()


def weights_variant(template: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """The template with fresh weights of the same shapes: the same code."""
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto()
    model.CopyFrom(template)
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(
            (rng.standard_normal(array.shape) * 0.3).astype(np.float32), init.name))
    return model


def one_layer_edit(template: onnx.ModelProto) -> onnx.ModelProto:
    """The CNN with its first activation changed (Relu -> LeakyRelu): one
    layer's code changes, the second activation's kernel is reused."""
    model = onnx.ModelProto()
    model.CopyFrom(template)
    for node in model.graph.node:
        if node.name == "relu1":
            node.op_type = "LeakyRelu"
            node.attribute.append(helper.make_attribute("alpha", 0.1))
    onnx.checker.check_model(model, full_check=True)
    return model


def image(seed=3):
    return np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)


def check_artifact(flowc, artifact, model_path):
    """The artifact at `artifact` computes what onnxruntime does for the model."""
    x = image()
    ours = flowc.execute(artifact, {"image": x})
    reference = onnxruntime_outputs(model_path, {"image": x})
    for name in reference:
        assert_close(ours[name], reference[name])


@pytest.fixture
def cnn(tmp_path):
    template = leaky_cnn(np.random.default_rng(0))
    return template, save(template, tmp_path / "cnn.onnx")


def test_an_edit_compiles_soon_after_the_save(flowc, tmp_path, cnn):
    template, path = cnn
    out = tmp_path / "cnn.fca"
    with Watch(flowc, path, "-o", out) as watch:
        # At start: one compile.
        first, _ = watch.event("compiled")
        assert first["trigger"] == "start" and first["result"] == "compiled", first
        assert first["since_save_seconds"] is None
        check_artifact(flowc, out, path)
        # A one-layer edit: only its kernel compiles.
        edited = one_layer_edit(template)
        saved = replace(edited, path)
        event, skipped = watch.event("compiled")
        latency = time.monotonic() - saved
        assert not skipped, skipped
        assert event["trigger"] == "save" and event["result"] == "compiled", event
        assert event["kernels_compiled"] >= 1 and event["kernels_reused"] >= 1, event
        assert event["artifact"] == str(out)
        check_artifact(flowc, out, path)
        print(f"one-layer edit: save to artifact line {latency:.3f} s "
              f"(compile {event['seconds']:.3f} s, debounce {DEBOUNCE_S} s)")
        assert latency < EDIT_BOUND_S, f"{latency:.3f} s from the save to the artifact"
        assert watch.stop() == 0


def test_five_saves_in_200_ms_compile_once(flowc, tmp_path, cnn):
    template, path = cnn
    with Watch(flowc, path, "-o", tmp_path / "cnn.fca") as watch:
        watch.event("compiled")
        # Five saves, truncate + write, 40 ms apart.
        times = []
        for seed in range(5):
            path.write_bytes(weights_variant(template, 10 + seed).SerializeToString())
            times.append(time.monotonic())
            if seed < 4:
                time.sleep(0.04)
        event, skipped = watch.event("compiled")
        # The fifth version's digest, from a copy (a submit of the watched
        # path would supersede the watch's own).
        shutil.copy(path, tmp_path / "probe.onnx")
        last = flowc.submit(tmp_path / "probe.onnx")["model_digest"]
        # A sixth, distinct save: the next compile is its own.
        sentinel = weights_variant(template, 99)
        replace(sentinel, path)
        after, skipped_after = watch.event("compiled")
        # Only a save that came later than the quiet period after the one
        # before it (a stalled test process) may compile on its own.
        gaps = sum(1 for a, b in zip(times, times[1:]) if b - a > 0.8 * DEBOUNCE_S)
        compiles = 1 + sum(1 for e in skipped_after if e["event"] == "compiled")
        assert not skipped, skipped
        assert compiles <= 1 + gaps, (compiles, gaps, skipped_after)
        if gaps == 0:
            assert compiles == 1 and event["model_digest"] == last, (event, last)
        assert after["model_digest"] != last and after["result"] == "relinked", after
        assert watch.stop() == 0


def test_a_broken_save_reports_and_keeps_the_last_artifact(flowc, tmp_path, cnn):
    template, path = cnn
    out = tmp_path / "cnn.fca"
    with Watch(flowc, path, "-o", out) as watch:
        watch.event("compiled")
        good = out.read_bytes()
        # Not a protobuf at all.
        path.write_bytes(b"\x08\x07garbage that is not an ONNX model\xff\xff")
        error, _ = watch.event("error")
        assert error["kind"] == "InvalidArgument" and error["exit_code"] == 3, error
        assert "cnn.onnx" in error["message"], error
        assert error["artifact"] == str(out)
        assert out.read_bytes() == good
        # A valid protobuf whose node reads a tensor nothing makes: the
        # message names the node.
        broken = onnx.ModelProto()
        broken.CopyFrom(template)
        broken.graph.node[1].input[0] = "no_such_tensor"
        replace(broken, path)
        error, _ = watch.event("error")
        assert error["exit_code"] == 3, error
        assert "relu1" in error["message"] or "no_such_tensor" in error["message"], error
        assert out.read_bytes() == good
        # The next good save compiles and replaces the artifact.
        fixed = weights_variant(template, 5)
        replace(fixed, path)
        event, _ = watch.event("compiled")
        assert event["result"] in ("relinked", "compiled"), event
        assert out.read_bytes() != good
        check_artifact(flowc, out, path)
        assert watch.stop() == 0


def test_a_weights_only_save_relinks_with_no_kernel_compiled(flowc, tmp_path, cnn):
    template, path = cnn
    out = tmp_path / "cnn.fca"
    with Watch(flowc, path, "-o", out) as watch:
        watch.event("compiled")
        replace(weights_variant(template, 7), path)
        event, _ = watch.event("compiled")
        assert event["result"] == "relinked" and event["kernels_compiled"] == 0, event
        check_artifact(flowc, out, path)
        # Rewriting the same bytes is a cache hit.
        path.write_bytes(path.read_bytes())
        event, _ = watch.event("compiled")
        assert event["result"] == "hit" and event["kernels_compiled"] == 0, event
        assert watch.stop() == 0


def test_an_editor_save_by_rename_and_a_delete_are_followed(flowc, tmp_path, cnn):
    template, path = cnn
    out = tmp_path / "cnn.fca"
    with Watch(flowc, path, "-o", out) as watch:
        watch.event("compiled")
        # vim's way: the old file renamed to a backup, a new file written.
        os.rename(path, tmp_path / "cnn.onnx~")
        onnx.save(weights_variant(template, 8), path)
        event, _ = watch.event("compiled")
        assert event["result"] == "relinked", event
        check_artifact(flowc, out, path)
        # Deleted: said once, then the model is waited for.
        good = out.read_bytes()
        path.unlink()
        waiting, _ = watch.event("waiting")
        assert waiting["model"] == str(path), waiting
        assert out.read_bytes() == good
        replace(weights_variant(template, 9), path)
        event, skipped = watch.event("compiled")
        assert not skipped, skipped
        check_artifact(flowc, out, path)
        assert watch.stop() == 0


def test_external_data_changes_are_seen(flowc, tmp_path, cnn):
    template, _ = cnn
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    path = model_dir / "cnn.onnx"

    def save_external(model, directory, location):
        # onnx.save converts the proto it is given in place: save a copy.
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        (directory / location).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(copy, directory / "cnn.onnx", save_as_external_data=True,
                  all_tensors_to_one_file=True, location=location, size_threshold=0)

    save_external(template, model_dir, "cnn.data")
    out = tmp_path / "cnn.fca"
    with Watch(flowc, path, "-o", out) as watch:
        watch.event("compiled")
        # Only the data file changes (the .onnx names the same offsets).
        staging = tmp_path / "staging"
        staging.mkdir()
        save_external(weights_variant(template, 11), staging, "cnn.data")
        assert (staging / "cnn.onnx").read_bytes() == path.read_bytes()
        os.replace(staging / "cnn.data", model_dir / "cnn.data")
        event, _ = watch.event("compiled")
        assert event["result"] == "relinked", event
        check_artifact(flowc, out, path)
        # An edit that moves the weights to a new file: that file is
        # watched from then on.
        save_external(weights_variant(template, 12), model_dir, "weights/v2.data")
        event, _ = watch.event("compiled")
        shutil.rmtree(staging)
        staging.mkdir()
        (staging / "weights").mkdir()
        save_external(weights_variant(template, 13), staging, "weights/v2.data")
        os.replace(staging / "weights" / "v2.data", model_dir / "weights" / "v2.data")
        event, _ = watch.event("compiled")
        assert event["result"] == "relinked", event
        check_artifact(flowc, out, path)
        assert watch.stop() == 0


def daemon_running(flowc):
    """False once status says no daemon runs (or, while it dies, fails)."""
    status = flowc.run("status", "--json", check=False)
    return status.returncode == 0 and json.loads(status.stdout)["running"]


def daemon_pid(flowc):
    return json.loads(flowc.run("status", "--json").stdout)["pid"]


def test_the_daemon_restarting_is_survived(flowc, tmp_path, cnn):
    template, path = cnn
    out = tmp_path / "cnn.fca"
    # The watch may not start a daemon itself: this test restarts it.
    env = dict(os.environ, FLOWC_AUTOSTART="0")
    with Watch(flowc, path, "-o", out, env=env) as watch:
        watch.event("compiled")
        pid = daemon_pid(flowc)
        os.kill(pid, signal.SIGKILL)
        while daemon_running(flowc):
            time.sleep(0.05)
        replace(weights_variant(template, 21), path)
        down, _ = watch.event("daemon_unavailable")
        assert down["message"], down
        flowc.run("daemon", "start")
        assert daemon_pid(flowc) != pid
        event, skipped = watch.event("compiled")
        assert all(e["event"] != "error" for e in skipped), skipped
        assert event["result"] == "relinked", event
        check_artifact(flowc, out, path)
        assert watch.stop() == 0


def test_run_prints_what_onnxruntime_computes(flowc, tmp_path, cnn):
    template, path = cnn
    x = image(4)
    np.save(tmp_path / "x.npy", x)
    with Watch(flowc, path, "-o", tmp_path / "cnn.fca", "--run", "--input",
               f"image={tmp_path / 'x.npy'}", "--print", "10") as watch:
        for version in (template, weights_variant(template, 31)):
            if version is not template:
                replace(version, path)
            watch.event("compiled")
            run, _ = watch.event("run")
            reference = onnxruntime_outputs(path, {"image": x})["probs"]
            (output,) = run["outputs"]
            assert output["name"] == "probs" and output["shape"] == [1, 10], output
            assert output["dtype"] == "float32" and output["elements"] == 10
            assert_close(np.array(output["values"], np.float32).reshape(1, 10), reference)
            for key, value in (("min", reference.min()), ("max", reference.max()),
                               ("mean", reference.mean())):
                assert abs(output[key] - float(value)) <= 1e-4, (key, output[key], value)
            assert run["latency_ms"] > 0 and run["first_run_ms"] > 0, run
        assert watch.stop() == 0


def test_text_lines_and_several_models(flowc, tmp_path, cnn):
    template, path = cnn
    other = save(make_models.make_mlp(np.random.default_rng(1)), tmp_path / "mlp.onnx")
    out_dir = tmp_path / "artifacts"
    with Watch(flowc, path, other, "-o", out_dir, json_mode=False) as watch:
        first = {watch.line(), watch.line()}
        line = re.compile(r"^flowc: watch (\S+): (compiled|hit|re-linked \(weights only\)), "
                          r"kernels \d+ compiled / \d+ reused, \d+\.\d{3} s"
                          r"( \(\d+\.\d{3} s after the save\))? -> (\S+)$")
        matches = [line.match(text) for text in first]
        assert all(matches), first
        assert {m.group(4) for m in matches} == {str(out_dir / "cnn.fca"), str(out_dir / "mlp.fca")}
        # A save of one model compiles that one only.
        replace(weights_variant(template, 41), path)
        text = watch.line()
        match = line.match(text)
        assert match and match.group(1) == str(path) and "re-linked" in text, text
        assert "after the save" in text
        assert watch.stop(signal.SIGTERM) == 0
    # On stderr, only what is watched.
    assert len(watch.stderr) == 2 and watch.stderr[1] is None, watch.stderr
    assert watch.stderr[0] == (f"flowc: watching {path} -> {out_dir / 'cnn.fca'}; "
                               f"{other} -> {out_dir / 'mlp.fca'}; Ctrl-C stops")


def test_sigint_during_a_compile_exits_zero(flowc, tmp_path, cnn):
    _, path = cnn
    with Watch(flowc, path, "-o", tmp_path / "cnn.fca") as watch:
        watch.event("watching")
        # The first compile may still be running: it is cancelled.
        assert watch.stop() == 0
    assert not [e for e in watch.stderr if e], watch.stderr


@pytest.mark.parametrize("args, code, message", [
    (["missing.onnx"], 3, "cannot read model 'missing.onnx'"),
    (["cnn.onnx", "--input", "x=x.npy"], 2, "--input needs --run"),
    (["cnn.onnx", "cnn2.onnx", "--run"], 2, "--run runs one model's artifact"),
    (["cnn.onnx", "--run", "--input", "image=nothing.npy"], 3, "cannot read 'nothing.npy'"),
    (["cnn.onnx", "-o", "no/such/dir/out.fca"], 3, "does not exist"),
    (["cnn.onnx", "cnn.onnx"], 3, "is named twice"),
    (["cnn.onnx", "--debounce", "1"], 2, "--debounce"),
])
def test_bad_command_lines_are_refused(flowc, tmp_path, cnn, args, code, message):
    shutil.copy(cnn[1], tmp_path / "cnn2.onnx")
    result = subprocess.run([str(BIN / "flowc"), "--cache-dir", str(flowc.cache_dir), "--socket",
                             str(flowc.socket), "watch", *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == code, result
    assert message in result.stderr, result.stderr
    assert result.stderr.startswith("flowc: error: "), result.stderr


def test_an_error_at_start_is_a_json_object_with_json(flowc, tmp_path):
    result = subprocess.run([str(BIN / "flowc"), "--cache-dir", str(flowc.cache_dir), "--socket",
                             str(flowc.socket), "watch", "missing.onnx", "--json"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 3, result
    (line,) = result.stdout.splitlines()
    error = json.loads(line)["error"]
    assert error["code"] == "NotFound" and error["kind"] == "not_found", error
    assert error["exit_code"] == 3 and "missing.onnx" in error["message"], error
    assert error["file"] == "missing.onnx", error
    assert result.stderr.startswith("flowc: error: cannot read model 'missing.onnx'"), result.stderr
