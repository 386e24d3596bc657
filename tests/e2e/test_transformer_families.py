"""Transformer families beyond BERT and GPT-2 (examples/
export_transformer_families.py: RoBERTa, T5, LLaMA, OPT, BLOOM, MobileBERT,
DeBERTa, the Whisper encoder, Swin), two blocks each with random weights,
compiled at -O3 and compared with onnxruntime at batch 2."""
import subprocess

import numpy as np
import pytest

from conftest import (ROOT, assert_close, device_target, onnxruntime_outputs,
                      skip_without_cuda_toolkit)

FAMILIES = ["roberta", "t5", "llama", "opt", "bloom", "mobilebert", "deberta", "whisper",
            "swin"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    python = ROOT / ".venv-export" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{python} is missing: scripts/setup.sh test installs transformers there")
    out = tmp_path_factory.mktemp("families")
    subprocess.run([str(python),
                    str(ROOT / "examples" / "export_transformer_families.py"), str(out)],
                   check=True, capture_output=True, text=True, timeout=900)
    return out


def perturbed(x):
    """Another input of the same kind: tokens rolled, features negated."""
    return np.roll(x, 1, axis=-1) if x.dtype == np.int64 else -x


@pytest.mark.parametrize("name", FAMILIES)
def test_family_matches_onnxruntime(flowc, exported, name):
    model = exported / f"{name}.onnx"
    x = np.load(exported / f"{name}_input.npy")
    flowc.submit(model, None, "-O", "3")
    ours = flowc.execute(model.with_suffix(".fca"), {"input": x})["hidden_states"]
    reference = onnxruntime_outputs(model, {"input": x})["hidden_states"]
    assert_close(ours, reference)
    # Matching means reading the input: another one gives another result.
    other = onnxruntime_outputs(model, {"input": perturbed(x)})["hidden_states"]
    assert not np.allclose(reference, other, rtol=1e-3, atol=1e-4)
    assert not np.allclose(ours[0], ours[1], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_family_compiles_for_cuda_and_matches_there(flowc, exported, name):
    skip_without_cuda_toolkit()
    model = exported / f"{name}.onnx"
    target, why_not = device_target()
    artifact = exported / f"{name}_cuda.fca"
    flowc.submit(model, artifact, "--target", target or "cuda:sm_90", "-O", "3")
    if target is None:
        pytest.skip(f"compiled; not run: {why_not}")
    x = np.load(exported / f"{name}_input.npy")
    ours = flowc.execute(artifact, {"input": x})["hidden_states"]
    assert_close(ours, onnxruntime_outputs(model, {"input": x})["hidden_states"], rtol=1e-3)
