"""Real models: torchvision networks exported with Debian's torch (seeded
random weights, BatchNorm statistics re-estimated so outputs depend on the
input), compiled through the daemon, run with `flowc run` and compared with
onnxruntime."""
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import ROOT, assert_close, onnxruntime_outputs

MODELS = ["squeezenet1_1", "mobilenet_v3_small", "resnet18"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchvision")
    for batch in (1, 2):
        subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
                        str(out / f"batch{batch}"), "--models", ",".join(MODELS),
                        "--batch", str(batch)],
                       check=True, capture_output=True, text=True, timeout=900)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_torchvision_model_matches_onnxruntime(flowc, exported, name):
    path = exported / "batch1" / f"{name}.onnx"
    x = np.load(exported / "batch1" / f"{name}_input.npy")
    flowc.submit(path)
    artifact = path.with_suffix(".fca")
    ours = flowc.execute(artifact, {"input": x})["logits"]
    assert_close(ours, onnxruntime_outputs(path, {"input": x})["logits"])
    # The output depends on the input: a compiler ignoring it could not pass.
    other = flowc.execute(artifact, {"input": np.flip(x, axis=3).copy()})["logits"]
    assert not np.allclose(ours, other, rtol=1e-3, atol=1e-6)


def test_torchvision_batch_two(flowc, exported):
    path = exported / "batch2" / "squeezenet1_1.onnx"
    x = np.load(exported / "batch2" / "squeezenet1_1_input.npy")
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"input": x})["logits"]
    assert_close(ours, onnxruntime_outputs(path, {"input": x})["logits"])
