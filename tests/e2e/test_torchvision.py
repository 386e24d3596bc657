"""Real models: torchvision networks exported with Debian's torch (seeded
random weights, BatchNorm statistics re-estimated so outputs depend on the
input), compiled through the daemon, run with `flowc run` and compared with
onnxruntime."""
import numpy as np
import pytest

from conftest import assert_close, export_models, onnxruntime_outputs

MODELS = ["squeezenet1_1", "mobilenet_v3_small", "resnet18"]


# Every model at opset 13, one at 17 too (import of all is checked in
# test_real_models.py); keeps CI short.
CASES = [(name, 13) for name in MODELS] + [("mobilenet_v3_small", 17)]


@pytest.mark.parametrize("name,opset", CASES)
def test_torchvision_model_matches_onnxruntime(flowc, real_models, name, opset):
    path = real_models[opset] / f"{name}.onnx"
    x = np.load(real_models[opset] / f"{name}_input.npy")
    flowc.submit(path)
    artifact = path.with_suffix(".fca")
    ours = flowc.execute(artifact, {"input": x})["logits"]
    assert_close(ours, onnxruntime_outputs(path, {"input": x})["logits"])
    # The output depends on the input: a compiler ignoring it could not pass.
    other = flowc.execute(artifact, {"input": np.flip(x, axis=3).copy()})["logits"]
    assert not np.allclose(ours, other, rtol=1e-3, atol=1e-6)


def test_torchvision_batch_two(flowc, tmp_path):
    out = export_models(tmp_path / "batch2", 13, ["squeezenet1_1"], batch=2)
    x = np.load(out / "squeezenet1_1_input.npy")
    path = out / "squeezenet1_1.onnx"
    flowc.submit(path)
    ours = flowc.execute(path.with_suffix(".fca"), {"input": x})["logits"]
    assert_close(ours, onnxruntime_outputs(path, {"input": x})["logits"])
