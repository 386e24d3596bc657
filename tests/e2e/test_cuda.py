"""The cuda targets from the CLI. Everywhere: a model compiles for a GPU
(ptxas assembling every kernel), the artifact says what it is for, and a
machine without a GPU runs it to one clear line and exit 5. With a GPU of
the target's capability: the results match the CPU's (the GPU tests skip,
printing why, on a machine without one: `pytest -rs`). Nothing is timed."""
import json
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import make_models
from conftest import (assert_close, device_target, onnxruntime_outputs, save,
                      skip_without_cuda_toolkit)

EXIT_UNAVAILABLE = 5


@pytest.fixture(autouse=True)
def cuda_toolkit():
    skip_without_cuda_toolkit()


def make_residual_block(rng):
    """relu(conv2(r) + shortcut(r)), r = relu(conv1(x)), conv1 with SAME_UPPER
    padding at stride 2 (uneven: 0 before, 1 after): the sum is a residual
    the memory plan adds to conv2's output in place."""
    def weight(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    inits = [weight("w1", (8, 8, 3, 3)), weight("b1", (8,)), weight("w2", (8, 8, 3, 3)),
             weight("b2", (8,)), weight("w3", (8, 8, 1, 1))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["r", "w3"], ["shortcut"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "shortcut"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["y"])]
    graph = helper.make_graph(
        nodes, "residual_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=make_models.IR_VERSION)


@pytest.fixture
def models(tmp_path):
    rng = np.random.default_rng(21)
    cnn = save(make_models.make_cnn(rng), tmp_path / "cnn.onnx")
    encoder = save(make_models.make_encoder(rng, layers=2), tmp_path / "encoder.onnx")
    block = save(make_residual_block(rng), tmp_path / "block.onnx")
    return {"cnn": (cnn, {"image": rng.standard_normal((1, 3, 32, 32), np.float32)}),
            "encoder": (encoder, {"hidden_states": rng.standard_normal((1, 16, 64), np.float32)}),
            "block": (block, {"x": rng.standard_normal((1, 8, 16, 16), np.float32)})}


def cnn_artifact(flowc, models, tmp_path, target):
    """The small CNN compiled for `target`, and its input saved for --input."""
    path, inputs = models["cnn"]
    artifact = tmp_path / "cnn.fca"
    flowc.submit(path, artifact, "--target", target)
    x = tmp_path / "x.npy"
    np.save(x, inputs["image"])
    return artifact, x


@pytest.mark.parametrize("target", ["cuda:sm_80", "cuda", "cuda:sm_100"])
def test_compiles_for_each_chip_and_says_what_it_is_for(flowc, models, tmp_path, target):
    path, _ = models["cnn"]
    artifact = tmp_path / "cnn.fca"
    # -O0: every op a generated kernel, each assembled by ptxas.
    result = flowc.submit(path, artifact, "--target", target, "-O0")
    assert result["cache"] == "miss"
    assert result["kernels_compiled"] >= 5
    # From -O1 convolutions, products, pooling and softmax are library
    # kernels: fewer generated ones remain (none, once the softmax writes
    # the graph's output itself).
    library = flowc.submit(path, tmp_path / "library.fca", "--target", target)
    assert library["kernels_compiled"] < result["kernels_compiled"]
    inspected = flowc.run("inspect", artifact).stdout
    chip = "sm_90" if target == "cuda" else target.split(":")[1]
    assert f"target=cuda:{chip}" in inspected
    # The same model for another target is another artifact.
    other = flowc.submit(path, tmp_path / "cpu.fca")
    assert other["artifact_digest"] != result["artifact_digest"]


def test_a_transformer_encoder_compiles(flowc, models, tmp_path):
    path, _ = models["encoder"]
    result = flowc.submit(path, tmp_path / "encoder.fca", "--target", "cuda:sm_90")
    assert result["kernels_compiled"] > 0


def test_a_residual_block_with_uneven_padding_compiles(flowc, models, tmp_path):
    """Its three convolutions are library kernels (the GPU test below runs
    them): uneven padding and a residual added in place compile for cuda."""
    path, inputs = models["block"]
    artifact = tmp_path / "block.fca"
    flowc.submit(path, artifact, "--target", "cuda:sm_90")
    cpu = flowc.submit(path, tmp_path / "cpu.fca")
    assert cpu["cache"] == "miss"
    ours = flowc.execute(tmp_path / "cpu.fca", inputs)
    assert_close(ours["y"], onnxruntime_outputs(path, inputs)["y"], rtol=1e-4)


def test_without_a_gpu_run_fails_in_one_line_with_exit_5(flowc, models, tmp_path):
    target, why_not = device_target()
    if target is not None:
        pytest.skip(f"this machine has a GPU ({target}): the no-GPU path is not reachable")
    artifact, x = cnn_artifact(flowc, models, tmp_path, "cuda:sm_90")
    ran = flowc.run("run", artifact, "--input", f"image={x}", check=False)
    assert ran.returncode == EXIT_UNAVAILABLE, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "is CUDA code for sm_90 and needs an NVIDIA GPU" in lines[0]
    assert "libcuda.so.1" in lines[0]
    # --json carries the same error and exit code.
    ran = flowc.run("run", artifact, "--input", f"image={x}", "--json", check=False)
    assert ran.returncode == EXIT_UNAVAILABLE
    assert json.loads(ran.stdout)["error"]["exit_code"] == EXIT_UNAVAILABLE
    # Any device: no GPU is the one line; an ordinal that is none is refused
    # before anything opens.
    ran = flowc.run("run", artifact, "--input", f"image={x}", "--gpu-device", "3",
                    check=False)
    assert ran.returncode == EXIT_UNAVAILABLE, ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    for bad in ("-1", "x", "1024"):
        ran = flowc.run("run", artifact, "--input", f"image={x}", "--gpu-device", bad,
                        check=False)
        assert ran.returncode == 2 and "--gpu-device" in ran.stderr, (bad, ran.stderr)


def test_on_the_gpu_a_device_that_is_not_there_is_refused(flowc, models, tmp_path):
    target, why_not = device_target()
    if target is None:
        pytest.skip(why_not)
    artifact, x = cnn_artifact(flowc, models, tmp_path, target)
    ran = flowc.run("run", artifact, "--input", f"image={x}", "--gpu-device", "1023",
                    check=False)
    assert ran.returncode == 3, ran.stderr
    assert "there is no GPU device 1023: the driver sees" in ran.stderr


def test_replicas_are_refused_in_one_line_without_a_gpu_or_with_bad_devices(
        flowc, models, tmp_path):
    """--gpu-devices: a malformed list is a usage error (exit 2), a repeated
    device or CPU code bad input (exit 3), before any device opens; without
    a GPU, the one line and exit 5."""
    artifact, x = cnn_artifact(flowc, models, tmp_path, "cuda:sm_90")
    run = ["run", artifact, "--input", f"image={x}"]
    for bad in (["--gpu-devices", "0,x"], ["--gpu-devices", "0,1024"],
                ["--gpu-devices", "-1"], ["--gpu-devices", "all,0"],
                ["--gpu-devices", "0", "--gpu-device", "1"],
                ["--gpu-devices", "0", "--profile"]):
        ran = flowc.run(*run, *bad, check=False)
        assert ran.returncode == 2 and "--gpu-devices" in ran.stderr, (bad, ran.stderr)
    ran = flowc.run(*run, "--gpu-devices", "1,0,1", check=False)
    assert ran.returncode == 3, ran.stderr
    assert "GPU device 1 is named twice" in ran.stderr
    # CPU code has no replicas.
    cpu = tmp_path / "cnn-cpu.fca"
    flowc.submit(models["cnn"][0], cpu)
    for devices in ("0", "all"):
        ran = flowc.run("run", cpu, "--input", f"image={x}", "--gpu-devices", devices,
                        check=False)
        assert ran.returncode == 3, ran.stderr
        assert "is CPU code: replicas are for CUDA code" in ran.stderr
    target, _ = device_target()
    if target is not None:
        return
    for devices in ("0,1", "all"):
        ran = flowc.run(*run, "--gpu-devices", devices, check=False)
        assert ran.returncode == EXIT_UNAVAILABLE, ran.stderr
        lines = ran.stderr.strip().splitlines()
        assert len(lines) == 1 and "needs an NVIDIA GPU" in lines[0], lines


def test_on_the_gpu_replicas_match_one_session(flowc, models, tmp_path):
    """Replicas on every GPU of the target's capability: the first device's
    outputs are one session's, and every other device's equal them (they run
    the first one's kernels, on weights broadcast through NCCL)."""
    target, why_not = device_target()
    if target is None:
        pytest.skip(why_not)
    path, inputs = models["block"]
    artifact = tmp_path / "block.fca"
    flowc.submit(path, artifact, "--target", target)
    x = tmp_path / "x.npy"
    np.save(x, inputs["x"])
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,compute_cap",
                          "--format=csv,noheader"], capture_output=True, text=True,
                         check=True)
    chip = target.split("_")[1]
    devices = [line.split(",")[0].strip() for line in smi.stdout.splitlines()
               if line.split(",")[1].strip().replace(".", "") == chip]
    one = json.loads(flowc.run("run", artifact, "--input", f"x={x}", "--json",
                               "--print", "64").stdout)
    ran = json.loads(flowc.run("run", artifact, "--input", f"x={x}", "--json",
                               "--print", "64", "--gpu-devices", ",".join(devices),
                               "--bench", "5").stdout)
    assert [r["device"] for r in ran["replicas"]] == [int(d) for d in devices]
    # `all` is every GPU of the artifact's capability, in the driver's order.
    every = json.loads(flowc.run("run", artifact, "--input", f"x={x}", "--json",
                                 "--gpu-devices", "all").stdout)
    assert [r["device"] for r in every["replicas"]] == [int(d) for d in devices]
    np.testing.assert_allclose(ran["outputs"][0]["values"], one["outputs"][0]["values"],
                               rtol=1e-5, atol=1e-6)
    assert all(r["max_abs_difference"] == 0 for r in ran["replicas"]), ran["replicas"]
    assert all(r["median_ms"] > 0 for r in ran["replicas"])
    assert ran["runs_per_second"] > 0
    assert ran["weights"]["bytes"] > 0
    if len(devices) == 1:
        assert ran["weights"]["method"] == "", ran["weights"]
    else:
        assert ran["weights"]["method"].startswith(("NCCL ", "upload")), ran["weights"]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_amp_compiles_for_cuda(flowc, models, tmp_path, precision):
    path, _ = models["cnn"]
    amp = flowc.submit(path, tmp_path / f"{precision}.fca", "--target", "cuda",
                       "--precision", precision)
    fp32 = flowc.submit(path, tmp_path / "fp32.fca", "--target", "cuda")
    assert amp["artifact_digest"] != fp32["artifact_digest"]
    inspected = flowc.run("inspect", tmp_path / f"{precision}.fca").stdout
    assert f"precision={precision}" in inspected


def test_amp_is_refused_where_the_hardware_lacks_it(flowc, models, tmp_path):
    path, _ = models["cnn"]
    ran = flowc.run("submit", path, "-o", tmp_path / "x.fca", "--target", "cuda:sm_75",
                    "--precision", "bf16", check=False)
    assert ran.returncode == 3, ran.stderr
    assert "bf16 needs sm_80 or newer" in ran.stderr
    ran = flowc.run("submit", path, "-o", tmp_path / "x.fca", "--precision", "fp16",
                    check=False)
    assert ran.returncode == 3, ran.stderr
    assert "fp16 is for the cuda targets" in ran.stderr


def test_an_unknown_chip_is_a_usage_error(flowc, models, tmp_path):
    path, _ = models["cnn"]
    ran = flowc.run("submit", path, "--target", "cuda:sm_61", check=False)
    assert ran.returncode == 2
    assert "cuda:sm_90" in ran.stderr


@pytest.mark.parametrize("options", [["-O0"], ["-O2"], ["--precision", "fp16"],
                                     ["--precision", "bf16"]])
@pytest.mark.parametrize("model", ["cnn", "encoder", "block"])
def test_on_the_gpu_results_match_onnxruntime(flowc, models, tmp_path, model, options):
    """-O0: generated kernels only; -O2: cuDNN, cuBLASLt and the runtime's
    kernels for the heavy ops; AMP: their operands in 16 bits (1e-2)."""
    target, why_not = device_target()
    if target is None:
        pytest.skip(why_not)
    if "bf16" in options and int(target.split("_")[1]) < 80:
        pytest.skip(f"{target} has no bfloat16 tensor cores")
    path, inputs = models[model]
    artifact = tmp_path / f"{model}.fca"
    flowc.submit(path, artifact, "--target", target, *options)
    ours = flowc.execute(artifact, inputs)
    expected = onnxruntime_outputs(path, inputs)
    amp = "--precision" in options
    for name, value in expected.items():
        assert_close(ours[name], value, rtol=1e-2 if amp else 1e-3)


def gpu_records(device, signature="library.conv2d:1,2,3"):
    """A `flowc tuning export` document with one GPU record."""
    return {"format": "flowc.tuning.v1", "records": [{
        "signature": signature, "device": device,
        "versions": "cuDNN 9.0.0, cuBLASLt 13.0.0; kernel abi 2",
        "candidate": "cudnn:engine=3;knobs=", "time_ns": 1000, "spread_ns": 0,
        "samples": 3, "separated": False, "noise": 0.0, "measured_ms": 1,
        "host": "gpu-host"}]}


def test_a_gpus_tuning_records_are_part_of_its_targets_keys(flowc, models, tmp_path):
    """Records of an sm_90 GPU can change what an sm_90 artifact's plan
    says its convolutions and products run: a new one is a new key for
    cuda:sm_90 compiles, and none for another capability's."""
    path, _ = models["cnn"]
    assert flowc.submit(path, tmp_path / "a.fca", "--target", "cuda:sm_90")["cache"] == "miss"
    assert flowc.submit(path, tmp_path / "b.fca", "--target", "cuda:sm_90")["cache"] == "hit"
    assert flowc.submit(path, tmp_path / "c.fca", "--target", "cuda:sm_80")["cache"] == "miss"
    document = tmp_path / "records.json"
    document.write_text(json.dumps(gpu_records("gpu NVIDIA H200 sm_90")))
    flowc.run("tuning", "import", document)
    listed = json.loads(flowc.run("tuning", "ls", "--json").stdout)
    assert [r["device"] for r in listed] == ["gpu NVIDIA H200 sm_90"]
    assert flowc.submit(path, tmp_path / "d.fca", "--target", "cuda:sm_90")["cache"] == "miss"
    assert flowc.submit(path, tmp_path / "e.fca", "--target", "cuda:sm_80")["cache"] == "hit"
    # With that GPU known, the convolutions are tunable for sm_90; a search
    # budget measures none of them where that GPU is not (on an sm_90 GPU
    # they are measured on it).
    searched = flowc.submit(path, tmp_path / "f.fca", "--target", "cuda:sm_90",
                            "--search-budget", "5")["search"]
    if device_target()[0] is None:
        assert searched["measured_kernels"] == 0 and searched["tuned_kernels"] == 0
        if "cuDNN 9" in flowc.run("--version").stdout:
            assert searched["tunable_kernels"] >= 1


def test_compile_and_export_key_by_the_farm_gpu_as_the_daemon_does(flowc, models, tmp_path):
    """`flowc compile` and `flowc cache export` take flowcd's --remote-gpu:
    with an sm_80 GPU's records here, a cuda:sm_80 compile keys by them, and
    naming another sm_80 GPU of the farm keys by that one's (none here), as
    a daemon given it would; a name that is not one is refused."""
    path, _ = models["cnn"]
    document = tmp_path / "records.json"
    document.write_text(json.dumps(gpu_records("gpu NVIDIA A100 sm_80")))
    flowc.run("tuning", "import", document)

    def compile_(out, *options):
        return json.loads(flowc.run("compile", path, "-o", tmp_path / out, "--target",
                                    "cuda:sm_80", "--json", *options).stdout)

    assert compile_("a.fca")["cache"] == "miss"
    assert compile_("b.fca", "--remote-gpu", "NVIDIA A100 sm_80")["cache"] == "hit"
    assert compile_("c.fca", "--remote-gpu", "NVIDIA A30 sm_80")["cache"] == "miss"
    exported = json.loads(flowc.run("cache", "export", path, "-o", tmp_path / "a30.bundle",
                                    "--target", "cuda:sm_80", "--remote-gpu",
                                    "NVIDIA A30 sm_80", "--json").stdout)
    assert exported["entries"] >= 1
    bad = flowc.run("compile", path, "-o", tmp_path / "d.fca", "--target", "cuda:sm_80",
                    "--remote-gpu", "A30", check=False)
    assert bad.returncode != 0 and "--remote-gpu" in bad.stderr and "A30" in bad.stderr


@pytest.mark.parametrize("model", ["cnn", "encoder"])
def test_on_the_gpu_trial_runs_become_records_later_sessions_use(flowc, models, tmp_path,
                                                                 model):
    """The first `flowc run` times the libraries' candidates and records
    them under this GPU; the next uses the records without trial runs, a
    new compile puts them in its plan, and every way gives onnxruntime's
    results."""
    target, why_not = device_target()
    if target is None:
        pytest.skip(why_not)
    path, inputs = models[model]
    artifact = tmp_path / f"{model}.fca"
    flowc.submit(path, artifact, "--target", target)
    x = tmp_path / "x.npy"
    name, value = next(iter(inputs.items()))
    np.save(x, value)

    def run(*options):
        ran = flowc.run("run", artifact, "--input", f"{name}={x}", "--json", *options)
        return json.loads(ran.stdout)["gpu_kernels"]

    first = run()
    assert first["sites"] > 0 and first["record"] == 0 and first["trials"] > 0
    assert first["recorded"] > 0
    # A site whose record the library no longer lists (a buffer aligned
    # below the arena's, say) runs its trials again, with a warning.
    second = run()
    assert second["record"] > 0 and second["trials"] < first["trials"]
    untouched = run("--no-gpu-records")
    assert untouched["record"] == 0 and untouched["recorded"] == 0
    listed = json.loads(flowc.run("tuning", "ls", "--json").stdout)
    assert all(r["device"].startswith("gpu ") for r in listed)
    # A compile now finds the records and names the choices in its plan.
    planned = tmp_path / "planned.fca"
    flowc.submit(path, planned, "--target", target)
    artifact = planned
    from_plan = run("--no-gpu-records")
    assert from_plan["plan"] > 0 and from_plan["trials"] < first["trials"]
    ours = flowc.execute(planned, inputs)
    for out, expected in onnxruntime_outputs(path, inputs).items():
        assert_close(ours[out], expected, rtol=1e-3)


def test_on_the_gpu_a_split_candidate_is_set_aside(flowc, models, tmp_path):
    """A tuning record whose candidate splits its site over two GPUs (tensor
    parallel), filed under this one GPU and faster than any other: a session
    on one GPU sets it aside with a warning and chooses by trial runs, and
    the results stay onnxruntime's."""
    target, why_not = device_target()
    if target is None:
        pytest.skip(why_not)
    path, inputs = models["encoder"]
    artifact = tmp_path / "encoder.fca"
    flowc.submit(path, artifact, "--target", target)
    x = tmp_path / "x.npy"
    name, value = next(iter(inputs.items()))
    np.save(x, value)
    first = json.loads(flowc.run("run", artifact, "--input", f"{name}={x}",
                                 "--json").stdout)["gpu_kernels"]
    assert first["recorded"] > 0
    exported = tmp_path / "records.json"
    flowc.run("tuning", "export", "-o", exported)
    document = json.loads(exported.read_text())
    for record in document["records"]:
        record["candidate"] += ";split=columns/2"
        record["time_ns"] = 1
        record["measured_ms"] += 1000
    exported.write_text(json.dumps(document))
    flowc.run("tuning", "import", exported)
    ran = flowc.run("run", artifact, "--input", f"{name}={x}", "--json")
    kernels = json.loads(ran.stdout)["gpu_kernels"]
    assert "over 2 GPUs (tensor parallel" in ran.stderr and "set aside" in ran.stderr
    assert kernels["record"] == 0 and kernels["trials"] > 0
    ours = flowc.execute(artifact, inputs)
    for out, expected in onnxruntime_outputs(path, inputs).items():
        assert_close(ours[out], expected, rtol=1e-3)
