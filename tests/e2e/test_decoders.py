"""Image and audio decoders (examples/export_decoders.py: DCGAN, U-Net, fast
style transfer, ESPCN, GroupNorm blocks, a 1-D audio front end) exported by
Debian's torch at opsets 11 and 17, compiled at -O3 and compared with
onnxruntime; compiled for CUDA (ptxas-assembled) too, and on a GPU run
there."""
import subprocess

import numpy as np
import pytest

from conftest import (ROOT, assert_close, device_target, onnxruntime_outputs,
                      skip_without_cuda_toolkit)

DECODERS = ["dcgan", "unet", "style", "espcn", "groupnorm", "audio"]
OPSETS = (11, 17)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    for opset in OPSETS:
        subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_decoders.py"),
                        str(root / f"opset{opset}"), "--opset", str(opset)],
                       check=True, capture_output=True, text=True, timeout=600)
    return root


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", DECODERS)
def test_decoder_matches_onnxruntime(flowc, exported, name, opset):
    model = exported / f"opset{opset}" / f"{name}.onnx"
    x = np.load(model.with_name(f"{name}_input.npy"))
    flowc.submit(model, None, "-O", "3")
    ours = flowc.execute(model.with_suffix(".fca"), {"input": x})["output"]
    reference = onnxruntime_outputs(model, {"input": x})["output"]
    assert_close(ours, reference)
    # Matching means reading the input: another one gives another result.
    assert not np.allclose(reference, onnxruntime_outputs(model, {"input": -x})["output"],
                           rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_compiles_for_cuda_and_matches_there(flowc, exported, name):
    skip_without_cuda_toolkit()
    model = exported / "opset17" / f"{name}.onnx"
    target, why_not = device_target()
    artifact = model.with_name(f"{name}_cuda.fca")
    flowc.submit(model, artifact, "--target", target or "cuda:sm_90", "-O", "3")
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    x = np.load(model.with_name(f"{name}_input.npy"))
    ours = flowc.execute(artifact, {"input": x})["output"]
    assert_close(ours, onnxruntime_outputs(model, {"input": x})["output"], rtol=1e-3)
