"""Compile options from the CLI: optimization levels, the pass switches,
--print-ir-after, --precision bf16 and the run's --threads; the kernel
cache; and the errors each gives for bad values."""
import json
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import make_models
from conftest import assert_close, onnxruntime_outputs, save
from test_first_hour import assert_bf16_refused, bf16_supported


@pytest.fixture
def cnn(tmp_path):
    rng = np.random.default_rng(5)
    path = save(make_models.make_cnn(rng, batch=2), tmp_path / "cnn.onnx")
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    return path, {"image": x}


def inspect(flowc, artifact):
    return json.loads(flowc.run("inspect", artifact, "--json").stdout)


@pytest.mark.parametrize("level", ["0", "1", "2", "3"])
def test_every_level_matches_onnxruntime(flowc, cnn, level):
    path, inputs = cnn
    artifact = path.with_name(f"cnn_O{level}.fca")
    flowc.submit(path, artifact, "-O", level)
    assert_close(flowc.execute(artifact, inputs)["probs"],
                 onnxruntime_outputs(path, inputs)["probs"])
    report = inspect(flowc, artifact)
    # -O0 is the all-generated reference: no library kernels, no arena.
    if level == "0":
        assert report["library_kernels"] == 0 and report["arena_bytes"] == 0
    else:
        # Two convolutions, the max and the global average pooling, the Gemm
        # and the softmax.
        assert report["library_kernels"] == 6
        assert report["arena_bytes"] > 0


def test_disabled_passes_change_the_code_not_the_answer(flowc, cnn):
    path, inputs = cnn
    artifact = path.with_name("cnn_plain.fca")
    result = flowc.submit(path, artifact, "--disable-pass", "flowc-outline-library-kernels",
                          "--disable-pass", "flowc-plan-activation-memory")
    assert result["code_cache"] == "miss"
    report = inspect(flowc, artifact)
    assert report["library_kernels"] == 0 and report["arena_bytes"] == 0
    assert "no-flowc-outline-library-kernels" in report["options"]
    assert_close(flowc.execute(artifact, inputs)["probs"],
                 onnxruntime_outputs(path, inputs)["probs"])


def test_print_ir_after_shows_the_outlined_kernels(flowc, cnn):
    path, _ = cnn
    flowc.submit(path)  # cached: printing must compile anyway
    result = flowc.run("submit", path, "-o", path.with_suffix(".fca"), "--print-ir-after",
                       "flowc-outline-library-kernels")
    assert "IR Dump After" in result.stderr
    assert result.stderr.count("flowc.library_call conv2d @flowc_kernel_") == 2
    assert "flowc.library_call matmul @flowc_kernel_" in result.stderr


def test_bad_pass_names_and_precisions_are_refused(flowc, cnn):
    path, _ = cnn
    result = flowc.run("submit", path, "--print-ir-after", "no-such-pass", check=False)
    assert result.returncode == 3
    assert "no pass named 'no-such-pass'" in result.stderr and "one-shot-bufferize" in result.stderr
    result = flowc.run("submit", path, "--disable-pass", "cse", check=False)
    assert result.returncode == 3 and "cannot disable pass 'cse'" in result.stderr
    result = flowc.run("submit", path, "-O", "0", "--precision", "bf16", check=False)
    assert result.returncode == 3 and "needs library kernels" in result.stderr
    result = flowc.run("submit", path, "--precision", "fp8", check=False)
    assert result.returncode == 2 and "fp8 not in {fp32,bf16,fp16}" in result.stderr
    result = flowc.run("repro", path, "-o", path.with_name("r"), "--precision", "fp8",
                       check=False)
    assert result.returncode == 2 and "fp8 not in {fp32,bf16,fp16}" in result.stderr
    # fp16 is the cuda targets' (AMP), not the CPU's.
    result = flowc.run("submit", path, "--precision", "fp16", check=False)
    assert result.returncode == 3 and "fp16 is for the cuda targets" in result.stderr
    flowc.submit(path)
    result = flowc.run("run", path.with_suffix(".fca"), "--threads", "0", check=False)
    assert result.returncode == 2 and "--threads: Value 0 not in range" in result.stderr
    result = flowc.run("run", path.with_suffix(".fca"), "--gpu-trials", "0", check=False)
    assert result.returncode == 2 and "--gpu-trials: Value 0 not in range" in result.stderr


def test_status_lists_the_passes_that_disable_pass_takes(flowc, cnn):
    path, _ = cnn
    # The daemon (auto-started by this submit) refuses another name, listing
    # its passes, and `flowc status` lists the same ones.
    result = flowc.run("submit", path, "--disable-pass", "cse", check=False)
    assert result.returncode == 3, result.stderr
    status = json.loads(flowc.run("status", "--json").stdout)
    passes = status["optional_passes"]
    assert "flowc-derive-weights" in passes and "flowc-outline-library-kernels" in passes
    assert f"cannot disable pass 'cse' (optional passes: {', '.join(passes)})" in result.stderr
    text = flowc.run("status").stdout
    assert f"optional passes (--disable-pass): {', '.join(passes)}\n" in text, text


def test_bf16_stays_close_to_fp32_on_a_real_network(flowc, cnn, request):
    """bf16 rounds inputs and weights of every convolution and product:
    ~1e-2 relative error on ResNet-18's logits, the same top class. Without
    AVX-512 oneDNN has no bf16 kernels: a clear refusal instead."""
    if not bf16_supported():
        path, _ = cnn
        result = flowc.run("submit", path, "-o", path.with_name("cnn_bf16.fca"),
                           "--precision", "bf16", check=False)
        assert_bf16_refused(result)
        assert not path.with_name("cnn_bf16.fca").exists()
        return
    directory = request.getfixturevalue("real_models")[13]
    path = directory / "resnet18.onnx"
    x = {"input": np.load(directory / "resnet18_input.npy")}
    artifact = directory / "resnet18_bf16.fca"
    flowc.submit(path, artifact, "--precision", "bf16")
    ours = flowc.execute(artifact, x)["logits"]
    reference = onnxruntime_outputs(path, x)["logits"]
    assert_close(ours, reference, rtol=5e-2)
    assert np.argmax(ours) == np.argmax(reference)
    assert "precision=bf16" in inspect(flowc, artifact)["options"]


def test_threads_do_not_change_the_answer(flowc, cnn):
    path, inputs = cnn
    flowc.submit(path)
    artifact = path.with_suffix(".fca")
    np.save(path.with_name("x.npy"), inputs["image"])
    outputs = []
    for threads in ("1", "2"):
        report = json.loads(flowc.run("run", artifact, "--input", f"image={path.with_name('x.npy')}",
                                      "--output-dir", path.with_name(f"out{threads}"),
                                      "--threads", threads, "--bench", "3", "--json").stdout)
        assert report["threads"] == int(threads) and report["median_ms"] > 0
        outputs.append(np.load(report["outputs"][0]["file"]))
    assert_close(outputs[0], outputs[1], rtol=1e-5)


def centering_model(last):
    """Twice "subtract the row mean, then Relu", then `last`: loop nests
    only, the two blocks identical."""
    nodes = []
    value = "x"
    for block in ("1", "2"):
        nodes += [helper.make_node("ReduceMean", [value], ["m" + block], axes=[1]),
                  helper.make_node("Sub", [value, "m" + block], ["c" + block]),
                  helper.make_node("Relu", ["c" + block], ["r" + block])]
        value = "r" + block
    nodes.append(helper.make_node(last, [value], ["y"]))
    graph = helper.make_graph(
        nodes, "centering", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4096])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", make_models.OPSET)],
                             ir_version=make_models.IR_VERSION)


def test_an_edited_layer_recompiles_only_its_kernels(flowc, tmp_path):
    x = {"x": np.random.default_rng(11).standard_normal((8, 4096)).astype(np.float32)}

    def submit(name, last):
        path = save(centering_model(last), tmp_path / f"{name}.onnx")
        artifact = path.with_suffix(".fca")
        result = flowc.run("submit", path, "-o", artifact, "--progress")
        reports = re.findall(r"kernels: (\d+) loop nests, (\d+) distinct kernels "
                             r"\((\d+) compiled, (\d+) cached\)", result.stderr)
        assert len(reports) == 1, result.stderr
        assert_close(flowc.execute(artifact, x)["y"], onnxruntime_outputs(path, x)["y"])
        return [int(figure) for figure in reports[0]]

    nests, distinct, compiled, cached = submit("sigmoid", "Sigmoid")
    # The second block calls the first block's kernels.
    assert nests > distinct and compiled == distinct and cached == 0
    # The kernel cache lives in the cache directory, across daemon restarts.
    flowc.run("daemon", "stop")
    flowc.run("daemon", "start")
    _, distinct, compiled, cached = submit("tanh", "Tanh")
    assert 0 < compiled < distinct and cached == distinct - compiled
