"""The Python client (python/, `import flowc`) against a real daemon: compile
a path, an onnx.ModelProto and a torch.nn.Module, run in-process through the
runtime's C API, errors as exceptions with their fields, cancel by Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from client_fixtures import (BIN, ROOT, TORCH_PYTHON, assert_close, client,  # noqa: F401
                             device_target, flowc_package, onnxruntime_outputs, save)

sys.path.insert(0, str(ROOT / "examples"))
import make_models  # noqa: E402


def cnn(tmp_path, seed=0, name="cnn.onnx"):
    return save(make_models.make_cnn(np.random.default_rng(seed)), tmp_path / name)


def cnn_input(seed=1):
    return np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)


def test_compile_and_run_match_onnxruntime(client, tmp_path):
    import flowc

    model = cnn(tmp_path)
    # The first call starts the daemon (none runs on this socket yet).
    assert not client.socket.exists()
    artifact = flowc.compile(model, progress=False)
    assert client.socket.exists()
    assert artifact.digest.startswith("sha256:")
    assert artifact.result["cache_hit"] is False and artifact.result["job_id"]
    assert [(s.name, s.dtype, s.shape) for s in artifact.inputs] == [
        ("image", "float32", (1, 3, 32, 32))]
    x = cnn_input()
    outputs = artifact.run(image=x)
    expected = onnxruntime_outputs(model, {"image": x})
    assert list(outputs) == list(expected)
    for name in expected:
        assert outputs[name].dtype == expected[name].dtype
        assert_close(outputs[name], expected[name])
    # Positional inputs, in plan order, give the same answer.
    np.testing.assert_array_equal(artifact.run(x)[name], outputs[name])
    # A second compile of the same file is a cache hit with the same digest.
    again = flowc.compile(model, progress=False)
    assert again.result["cache_hit"] is True and again.digest == artifact.digest
    # With flowc submit's defaults (-O2, fp32): the CLI hits the same entry.
    submitted = json.loads(client.cli.run("submit", model, "-o", tmp_path / "cli.fca",
                                          "--json").stdout)
    assert submitted["cache"] == "hit", submitted
    assert submitted["artifact_digest"] == artifact.digest, submitted


def test_runtime_warnings_go_to_stderr_not_stdout(client, tmp_path, capfd):
    """A warning of the in-process runtime (here: a searched plan's
    convolution candidate this CPU's library lacks, made so by renaming its
    implementation) is printed on stderr as `flowc: warning: ...`, never into
    the host's stdout (a notebook cell's output)."""
    import flowc
    from test_search import inputs, moved_artifact, tuning_model

    model = tuning_model(tmp_path / "m.onnx")
    searched = tmp_path / "searched.fca"
    client.cli.run("submit", model, "-o", searched, "--search-budget", "10")
    moved = moved_artifact(searched, tmp_path / "moved.fca")
    capfd.readouterr()
    outputs = flowc.load(moved, verify=False).run(**inputs())
    assert list(outputs) == ["y"]
    out, err = capfd.readouterr()
    assert out == ""
    warnings = [line for line in err.splitlines() if line.startswith("flowc: warning:")]
    assert len(warnings) == 1 and "cannot run here" in warnings[0], err


def test_inspect_bench_and_output_placement(client, tmp_path):
    import flowc

    model = cnn(tmp_path)
    out = tmp_path / "placed" / "cnn.fca"
    out.parent.mkdir()
    artifact = flowc.compile(model, output=out, progress=False)
    assert artifact.path == str(out) and out.is_file()
    # Placed from the daemon's cache file (a hard link on one filesystem).
    assert os.stat(out).st_nlink >= 2
    info = artifact.inspect()
    assert info["digest"] == artifact.digest and info["size"] == out.stat().st_size
    assert info["inputs"] == [{"name": "image", "dtype": "float32", "shape": [1, 3, 32, 32]}]
    assert len(info["outputs"]) == 1 and info["metadata"]
    stats = artifact.bench(image=cnn_input(), repeat=5, warmup=1)
    assert stats["repeat"] == 5
    assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"]
    # flowc.load opens the placed file on its own; its digest is hashed here.
    loaded = flowc.load(out)
    assert loaded.digest == artifact.digest
    np.testing.assert_array_equal(loaded.run(image=cnn_input())[artifact.outputs[0].name],
                                  artifact.run(image=cnn_input())[artifact.outputs[0].name])


def test_a_model_proto_compiles(client, tmp_path):
    import flowc

    proto = make_models.make_cnn(np.random.default_rng(4))
    artifact = flowc.compile(proto, progress=False)
    x = cnn_input()
    path = save(proto, tmp_path / "same.onnx")
    expected = onnxruntime_outputs(path, {"image": x})
    for name, value in artifact.run(image=x).items():
        assert_close(value, expected[name])
    # The same model as a file is the same model: a cache hit.
    assert flowc.compile(path, progress=False).result["cache_hit"] is True


def test_a_float16_model_takes_and_returns_float16_arrays(client, tmp_path):
    import flowc
    import to_float16

    proto = to_float16.to_float16(make_models.make_cnn(np.random.default_rng(5)))
    path = save(proto, tmp_path / "half.onnx")
    artifact = flowc.compile(path, progress=False)
    assert [(s.name, s.dtype) for s in artifact.inputs] == [("image", "float16")]
    x = cnn_input().astype(np.float16)
    expected = onnxruntime_outputs(path, {"image": x})
    outputs = artifact.run(image=x)
    for name, value in outputs.items():
        assert value.dtype == np.float16
        assert_close(value.astype(np.float32), expected[name].astype(np.float32), 1e-2)
    # An array keeps its dtype: float32 for a float16 input is named.
    with pytest.raises(flowc.InvalidModel,
                       match="input 'image' is float32, the model expects float16"):
        artifact.run(image=x.astype(np.float32))
    # A big-endian float16 copy is made native first.
    np.testing.assert_array_equal(artifact.run(image=x.astype(">f2"))[name], value)


def test_a_quantized_model_takes_uint8_and_returns_int8_arrays(client, tmp_path):
    import flowc

    nodes = [helper.make_node("DequantizeLinear", ["image", "s", "z"], ["x"]),
             helper.make_node("QuantizeLinear", ["x", "t", "zt"], ["y"])]
    graph = helper.make_graph(
        nodes, "requantize", [helper.make_tensor_value_info("image", TensorProto.UINT8, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 3])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
         numpy_helper.from_array(np.array(128, np.uint8), "z"),
         numpy_helper.from_array(np.array(0.25, np.float32), "t"),
         numpy_helper.from_array(np.array(-3, np.int8), "zt")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = save(model, tmp_path / "requantize.onnx")
    artifact = flowc.compile(path, progress=False)
    assert [(s.name, s.dtype) for s in artifact.inputs] == [("image", "uint8")]
    assert [(s.name, s.dtype) for s in artifact.outputs] == [("y", "int8")]
    image = np.array([[0, 100, 127], [128, 140, 255]], np.uint8)
    y = artifact.run(image=image)["y"]
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, onnxruntime_outputs(path, {"image": image})["y"])
    with pytest.raises(flowc.InvalidModel,
                       match="input 'image' is int8, the model expects uint8"):
        artifact.run(image=image.astype(np.int8))


def test_a_model_proto_with_external_data_is_saved_as_external_data(client, tmp_path,
                                                                     monkeypatch):
    import flowc
    import flowc._compile

    proto = make_models.make_cnn(np.random.default_rng(5))
    seen = {}
    save_model = onnx.save

    def spy(model, path, **options):
        seen.update(options)
        return save_model(model, path, **options)

    # As if the proto were past protobuf's limit: the weights go out as
    # external data, the proto is never serialized whole.
    monkeypatch.setattr(flowc._compile, "PROTOBUF_LIMIT", 1000)
    monkeypatch.setattr(onnx, "save", spy)
    before = proto.SerializeToString()
    artifact = flowc.compile(proto, progress=False)
    assert seen.get("save_as_external_data") is True
    # The caller's proto is as it was (its weights back in place).
    assert proto.SerializeToString() == before
    x = cnn_input()
    expected = onnxruntime_outputs(save_model_file(proto, tmp_path), {"image": x})
    for name, value in artifact.run(image=x).items():
        assert_close(value, expected[name])


def save_model_file(proto, tmp_path):
    path = tmp_path / "reference.onnx"
    onnx.save_model(proto, str(path))
    return path


def softmax_axis_model(path):
    """A Softmax whose axis 5 does not exist on a [2,3] input."""
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], name="probs", axis=5)], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    path.write_bytes(model.SerializeToString())
    return path


def test_a_malformed_model_raises_invalid_model_with_its_fields(client, tmp_path):
    import flowc

    path = softmax_axis_model(tmp_path / "bad.onnx")
    with pytest.raises(flowc.InvalidModel) as raised:
        flowc.compile(path, progress=False)
    error = raised.value
    assert isinstance(error, flowc.FlowcError)
    assert error.kind == "invalid_argument" and error.code == 1
    assert "node 'probs' (Softmax): axis 5 is out of range for input [2,3]" in error.message
    assert (error.node, error.op) == ("probs", "Softmax")
    assert error.file == str(path)
    assert error.to_dict()["op"] == "Softmax"
    # The daemon keeps serving.
    assert flowc.compile(cnn(tmp_path), progress=False).digest


def test_a_missing_model_raises_not_found_naming_the_path(client, tmp_path):
    import flowc

    missing = tmp_path / "nowhere" / "model.onnx"
    with pytest.raises(flowc.NotFound) as raised:
        flowc.compile(missing, progress=False)
    assert str(missing) in raised.value.message and raised.value.file == str(missing)
    assert raised.value.kind == "not_found"
    with pytest.raises(flowc.InvalidModel, match="cannot compile a builtins.int"):
        flowc.compile(42, progress=False)


def test_bad_compile_options_raise_invalid_argument_naming_them(client, tmp_path):
    import flowc

    path = cnn(tmp_path)
    # Names the wire has no enum value for are refused before any RPC.
    with pytest.raises(flowc.InvalidModel,
                       match=r"unknown target 'tpu' \(supported: cpu, cuda, cuda:sm_75"):
        flowc.compile(path, target="tpu", progress=False)
    with pytest.raises(flowc.InvalidModel,
                       match=r"unknown precision 'fp8' \(supported: fp32, bf16, fp16\)"):
        flowc.compile(path, precision="fp8", progress=False)
    # A pass name the daemon's compiler lacks is its refusal, with the list.
    with pytest.raises(flowc.InvalidModel) as raised:
        flowc.compile(path, disabled_passes=["no-such-pass"], progress=False)
    assert raised.value.kind == "invalid_argument"
    assert "cannot disable pass 'no-such-pass' (optional passes: flowc-derive-weights" \
        in raised.value.message


def test_bad_run_inputs_raise_naming_the_input(client, tmp_path):
    import flowc

    artifact = flowc.compile(cnn(tmp_path), progress=False)
    x = cnn_input()
    cases = [
        ({}, "missing input 'image' of shape [1,3,32,32]"),
        ({"image": x, "other": x}, "the model has no input named 'other'"),
        ({"image": x[:, :2]}, "input 'image' has shape [1,2,32,32], the model expects "
                              "[1,3,32,32]"),
        ({"image": x.astype(np.float64)}, "input 'image' is float64, the model expects "
                                          "float32"),
        ({"image": x.astype(np.int64)}, "input 'image' is int64, the model expects float32"),
    ]
    for inputs, message in cases:
        with pytest.raises(flowc.InvalidModel) as raised:
            artifact.run(**inputs)
        assert message in raised.value.message, raised.value.message
        assert raised.value.code == 1
    with pytest.raises(flowc.InvalidModel, match="2 positional inputs given, the model has 1"):
        artifact.run(x, x)
    # A strided view and a big-endian copy are made dense and native first.
    wide = np.repeat(x, 2, axis=3)[..., ::2]
    assert not wide.flags.c_contiguous
    name = artifact.outputs[0].name
    np.testing.assert_array_equal(artifact.run(image=wide)[name], artifact.run(image=x)[name])
    np.testing.assert_array_equal(artifact.run(image=x.astype(">f4"))[name],
                                  artifact.run(image=x)[name])
    with pytest.raises(flowc.InvalidModel, match="input 'image' is not an array of numbers"):
        artifact.run(image="not numbers")
    with pytest.raises(flowc.InvalidModel, match="input 'image' is object, the model expects"):
        artifact.run(image=np.array([object()]))
    # A list is taken as the input's dtype.
    np.testing.assert_array_equal(artifact.run(image=x.tolist())[name],
                                  artifact.run(image=x)[name])
    # A closed artifact says so.
    artifact.close()
    with pytest.raises(flowc.FailedPrecondition, match="the artifact is closed"):
        artifact.run(image=x)


def test_opening_what_is_no_artifact_raises(client, tmp_path):
    import flowc

    garbage = tmp_path / "garbage.fca"
    garbage.write_bytes(b"\0" * 8192)
    with pytest.raises(flowc.InvalidModel) as raised:
        flowc.load(garbage)
    assert str(garbage) in raised.value.message
    artifact = flowc.compile(cnn(tmp_path), output=tmp_path / "whole.fca", progress=False)
    cut = tmp_path / "cut.fca"
    cut.write_bytes(open(artifact.path, "rb").read()[:-200])
    with pytest.raises(flowc.DataLoss) as raised:
        flowc.load(cut)
    assert "cut.fca" in raised.value.message and raised.value.kind == "data_loss"
    with pytest.raises(flowc.NotFound):
        flowc.load(tmp_path / "none.fca")


def test_progress_events_reach_the_caller(client, tmp_path):
    import flowc

    events = []
    artifact = flowc.compile(cnn(tmp_path, seed=7), progress=True, on_event=events.append)
    kinds = [e.WhichOneof("event") for e in events]
    accepted = [e.accepted.job_id for e in events if e.WhichOneof("event") == "accepted"]
    assert accepted == [artifact.result["job_id"]], kinds
    stages = [e.progress.stage for e in events if e.WhichOneof("event") == "progress"]
    assert "ingest" in stages and "link" in stages, stages


def slow_model(path, blocks=48):
    """Many distinct loop kernels (as tests/e2e/test_tasks.py's chain): a
    compile that takes seconds on one worker."""
    from onnx import numpy_helper

    rng = np.random.default_rng(3)
    nodes, inits, name = [], [], "x"
    for i in range(blocks):
        inits.append(numpy_helper.from_array(
            rng.standard_normal((1, 64 + i)).astype(np.float32), f"s{i}"))
        inits.append(numpy_helper.from_array(np.array([0, 0, 0, 1], np.int64), f"p{i}"))
        nodes += [helper.make_node("Mul", [name, f"s{i}"], [f"m{i}"], name=f"mul{i}"),
                  helper.make_node(["Relu", "Tanh", "Sigmoid", "Abs"][i % 4], [f"m{i}"],
                                   [f"t{i}"], name=f"act{i}"),
                  helper.make_node("Pad", [f"t{i}", f"p{i}"], [f"y{i}"], name=f"pad{i}")]
        name = f"y{i}"
    graph = helper.make_graph(
        nodes, "slow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [32, 64 + blocks])], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def wait_until(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return None


def test_keyboard_interrupt_cancels_the_job(client, tmp_path):
    # One worker, so the job stays running long enough to interrupt.
    daemon = subprocess.Popen(
        [str(BIN / "flowcd"), "--cache-dir", str(client.cache_dir), "--socket",
         str(client.socket), "--log-file", str(tmp_path / "flowcd.log"), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_until(client.socket.exists, 30), "flowcd did not start"
    model = slow_model(tmp_path / "slow.onnx")
    script = textwrap.dedent(f"""
        import sys, flowc
        try:
            flowc.compile({str(model)!r}, progress=False)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
        print("finished", flush=True)
        """)
    child = subprocess.Popen([sys.executable, "-c", script], env=client.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def running_job():
        return [j for j in client.jobs() if j["state"] == "running"]

    jobs = wait_until(running_job, 120)
    assert jobs, f"no job seen running: {client.jobs()}"
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130 and out.strip() == "interrupted", (out, err)
    # The daemon saw the client go and cancelled its job.
    job_id = jobs[0]["id"]
    state = wait_until(lambda: next(j["state"] for j in client.jobs() if j["id"] == job_id)
                       not in ("running", "queued") and
                       next(j["state"] for j in client.jobs() if j["id"] == job_id), 120)
    assert state == "cancelled", client.jobs()
    client.cli.run("daemon", "stop")
    assert daemon.wait(timeout=60) == 0


def test_a_torch_module_compiles_and_matches_torch(client, tmp_path):
    # Debian's torch lives in the system Python: .venv-torch sees it, and
    # has the client's dependencies (scripts/requirements-torch.txt).
    assert TORCH_PYTHON.is_file(), f"{TORCH_PYTHON} is missing: run scripts/setup.sh"
    script = textwrap.dedent("""
        import json, sys
        import numpy as np, torch
        import flowc

        torch.manual_seed(0)
        module = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))
        x = torch.randn(2, 3, 16, 16)
        artifact = flowc.compile(module, example_inputs={"image": x}, progress=False)
        expected = module(x).detach().numpy()
        (actual,) = artifact.run(image=x.numpy()).values()
        scale = float(np.max(np.abs(expected)))
        print(json.dumps({"shape": list(actual.shape), "training": module.training,
                          "error": float(np.max(np.abs(actual - expected))) / scale,
                          "inputs": [s.name for s in artifact.inputs]}))
        """)
    run = subprocess.run([str(TORCH_PYTHON), "-c", script], env=client.env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["shape"] == [2, 5] and report["inputs"] == ["image"]
    assert report["error"] <= 1e-4, report
    # The module's mode is left as it was.
    assert report["training"] is True


def test_a_cuda_artifact_runs_on_the_gpu_it_is_given(client, tmp_path):
    """compile(target="cuda:...", gpu_device=N) and load(..., gpu_device=N):
    without a GPU the first run raises Unavailable in one line; a negative
    device is refused; with one, device 0 matches onnxruntime and a device
    the driver does not see raises NotFound naming the devices."""
    import flowc

    model = cnn(tmp_path)
    target, _ = device_target()
    x = cnn_input()
    artifact = flowc.compile(model, target=target or "cuda:sm_90", progress=False)
    with pytest.raises(flowc.InvalidModel, match="GPU device -1 is negative"):
        flowc.load(artifact.path, gpu_device=-1).run(image=x)
    if target is None:
        with pytest.raises(flowc.Unavailable, match="needs an NVIDIA GPU") as raised:
            artifact.run(image=x)
        assert "\n" not in str(raised.value)
        with pytest.raises(flowc.Unavailable, match="needs an NVIDIA GPU"):
            flowc.load(artifact.path, gpu_device=3).run(image=x)
        return
    outputs = artifact.run(image=x)
    for name, expected in onnxruntime_outputs(model, {"image": x}).items():
        assert_close(outputs[name], expected, rtol=1e-3)
    with pytest.raises(flowc.NotFound, match="there is no GPU device 1023"):
        flowc.load(artifact.path, gpu_device=1023).run(image=x)
