"""torchvision's video classifiers (R3D-18, MC3-18, R(2+1)D-18: 3-D
convolutions over clips of 8 frames of 112 x 112) exported by Debian's
torch, compiled at -O3 and compared with onnxruntime; compiled for CUDA
(ptxas-assembled) too, and on a GPU run there. The 3-D ops' attributes are
checked op by op in test_ops.py."""
import numpy as np
import pytest

from conftest import (assert_close, device_target, export_models, onnxruntime_outputs,
                      skip_without_cuda_toolkit)

VIDEO = ["r3d_18", "mc3_18", "r2plus1d_18"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_models(tmp_path_factory.mktemp("video"), 17, VIDEO)


@pytest.mark.parametrize("name", VIDEO)
def test_video_model_matches_onnxruntime(flowc, exported, name):
    model = exported / f"{name}.onnx"
    x = np.load(exported / f"{name}_input.npy")
    flowc.submit(model, None, "-O", "3")
    ours = flowc.execute(model.with_suffix(".fca"), {"input": x})["logits"]
    assert_close(ours, onnxruntime_outputs(model, {"input": x})["logits"])
    # Frames reversed in time: another clip, another answer (the depth
    # axis is read, not only each frame).
    backwards = np.flip(x, axis=2).copy()
    other = flowc.execute(model.with_suffix(".fca"), {"input": backwards})["logits"]
    assert_close(other, onnxruntime_outputs(model, {"input": backwards})["logits"])
    assert not np.allclose(ours, other, rtol=1e-3, atol=1e-6)


def test_video_model_compiles_for_cuda_and_matches_there(flowc, exported):
    skip_without_cuda_toolkit()
    model = exported / "r2plus1d_18.onnx"
    target, why_not = device_target()
    artifact = model.with_name("r2plus1d_18_cuda.fca")
    flowc.submit(model, artifact, "--target", target or "cuda:sm_90", "-O", "3")
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    x = np.load(exported / "r2plus1d_18_input.npy")
    ours = flowc.execute(artifact, {"input": x})["logits"]
    assert_close(ours, onnxruntime_outputs(model, {"input": x})["logits"], rtol=1e-3)
