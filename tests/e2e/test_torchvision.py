"""Real models: torchvision networks exported with Debian's torch (seeded
random weights, BatchNorm statistics re-estimated so outputs depend on the
input), compiled at -O3 through the daemon (library kernels, fusion, the
activation arena), run with `flowc run` and compared with onnxruntime, at
batch 1 and batch 2."""
import json

import numpy as np
import pytest

from conftest import TORCHVISION_MODELS, assert_close, export_models, onnxruntime_outputs


def check_model(flowc, directory, name, *options):
    path = directory / f"{name}.onnx"
    x = np.load(directory / f"{name}_input.npy")
    flowc.submit(path, None, *options)
    artifact = path.with_suffix(".fca")
    ours = flowc.execute(artifact, {"input": x})["logits"]
    assert_close(ours, onnxruntime_outputs(path, {"input": x})["logits"])
    # The output depends on the input: a compiler ignoring it could not pass.
    other = flowc.execute(artifact, {"input": np.flip(x, axis=3).copy()})["logits"]
    assert not np.allclose(ours, other, rtol=1e-3, atol=1e-6)
    return ours


# Every model at opset 13 and -O3, one at 17 too (import of all is checked
# in test_real_models.py).
CASES = [(name, 13) for name in TORCHVISION_MODELS] + [("mobilenet_v3_small", 17)]


@pytest.mark.parametrize("name,opset", CASES)
def test_torchvision_model_matches_onnxruntime(flowc, real_models, name, opset):
    check_model(flowc, real_models[opset], name, "-O", "3")


@pytest.fixture(scope="module")
def batch_two(tmp_path_factory):
    return export_models(tmp_path_factory.mktemp("batch2"), 13, TORCHVISION_MODELS, batch=2)


@pytest.mark.parametrize("name", TORCHVISION_MODELS)
def test_torchvision_batch_two(flowc, batch_two, name):
    ours = check_model(flowc, batch_two, name, "-O", "3")
    # Two different images, two different answers.
    assert not np.allclose(ours[0], ours[1], rtol=1e-3, atol=1e-6)


def test_reference_path_matches_library_kernels(flowc, real_models):
    """-O0 keeps every op in generated loops (no library kernels, no arena):
    the two paths agree on a real network."""
    directory = real_models[13]
    path = directory / "squeezenet1_1.onnx"
    x = {"input": np.load(directory / "squeezenet1_1_input.npy")}
    flowc.submit(path, directory / "squeeze_o0.fca", "-O", "0")
    flowc.submit(path, directory / "squeeze_o3.fca", "-O", "3")
    reference = flowc.execute(directory / "squeeze_o0.fca", x)["logits"]
    assert_close(flowc.execute(directory / "squeeze_o3.fca", x)["logits"], reference)


@pytest.fixture(scope="module")
def with_batchnorm(tmp_path_factory):
    return export_models(tmp_path_factory.mktemp("batchnorm"), 13, ["resnet18"],
                         keep_batchnorm=True)


def test_batchnorm_folds_into_derived_weights(flowc, with_batchnorm):
    """A ResNet-18 file with its 20 BatchNormalization nodes: at -O2 each
    folds into its convolution as derived weights (computed once, cached by
    recipe and source digests); the result matches onnxruntime and -O0."""
    path = with_batchnorm / "resnet18.onnx"
    x = {"input": np.load(with_batchnorm / "resnet18_input.npy")}

    def submit(out, *options):
        result = flowc.run("submit", path, "-o", out, "--progress", *options)
        return [line for line in result.stderr.splitlines() if "derive:" in line]

    first = submit(with_batchnorm / "o2.fca", "-O", "2")
    assert len(first) == 1 and "(40 computed, 0 cached)" in first[0], first
    # Another option set compiles new code but reuses every derived weight.
    again = submit(with_batchnorm / "o3.fca", "-O", "3")
    assert len(again) == 1 and "(0 computed, 40 cached)" in again[0], again
    # Without the pass the model's own weights are bound.
    assert submit(with_batchnorm / "plain.fca", "-O", "2", "--disable-pass",
                  "flowc-derive-weights") == []
    reference = onnxruntime_outputs(path, x)["logits"]
    for name in ("o2", "o3", "plain"):
        assert_close(flowc.execute(with_batchnorm / f"{name}.fca", x)["logits"], reference)
    info = json.loads(flowc.run("inspect", with_batchnorm / "o2.fca", "--json").stdout)
    # 20 folded weights and biases; the BatchNorm parameters are gone, the
    # classifier's weight and bias stay.
    assert info["derived_weights"] == 40 and info["weights"] == 42, info


def test_kernel_weights_are_packed_once_and_read_in_place(flowc, real_models, tmp_path):
    """ResNet-18's filters and classifier go into the artifact in the layouts
    oneDNN reads here, packed at link and cached (another option set reuses
    them); every library kernel site then reads its weights in place."""
    directory = real_models[13]
    path = directory / "resnet18.onnx"
    x = np.load(directory / "resnet18_input.npy")
    np.save(tmp_path / "x.npy", x)

    def submit(out, *options):
        result = flowc.run("submit", path, "-o", out, "--progress", *options)
        lines = [line for line in result.stderr.splitlines() if "pack:" in line]
        assert len(lines) == 1, result.stderr
        return lines[0]

    first = submit(tmp_path / "o2.fca", "-O", "2")
    count = int(first.split("pack: ")[1].split()[0])
    # 20 convolutions and the classifier.
    assert count == 21 and f"({count} packed, 0 cached)" in first, first
    again = submit(tmp_path / "o3.fca", "-O", "3")
    assert f"(0 packed, {count} cached)" in again, again
    report = json.loads(flowc.run("run", tmp_path / "o3.fca", "--input",
                                  f"input={tmp_path / 'x.npy'}", "--output-dir",
                                  tmp_path / "out", "--json").stdout)
    assert report["packed_weights_in_place"] == count
    info = json.loads(flowc.run("inspect", tmp_path / "o3.fca", "--json").stdout)
    assert info["packed_weights"] == count and info["packed_weight_bytes"] > 0, info
    assert_close(np.load(report["outputs"][0]["file"]),
                 onnxruntime_outputs(path, {"input": x})["logits"])
