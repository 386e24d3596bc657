"""The real-model set of the ingest issue: torchvision CNNs and ViT, a
BERT-base encoder and a GPT-2-small decoder, exported with seeded random
weights at opsets 13 and 17. Every model imports into IR that verifies with
all shapes static (`flowc inspect`); the transformers, which the torchvision
tests do not cover, are compiled and compared with onnxruntime."""
import json

import numpy as np
import pytest

from conftest import (EXPORT_OPSETS, TORCHVISION_MODELS, TRANSFORMER_MODELS, assert_close,
                      export_models, model_inputs, onnxruntime_outputs)

@pytest.mark.parametrize("opset", EXPORT_OPSETS)
@pytest.mark.parametrize("name", TORCHVISION_MODELS + TRANSFORMER_MODELS)
def test_real_model_imports_and_verifies(flowc, real_models, name, opset):
    path = real_models[opset] / f"{name}.onnx"
    report = json.loads(flowc.run("inspect", path, "--json").stdout)
    assert report["opset"] == opset
    assert report["parameters"] > 1_000_000
    assert all(dim > 0 for tensor in report["inputs"] + report["outputs"]
               for dim in tensor["shape"])


def check_transformer(flowc, directory, name):
    path = directory / f"{name}.onnx"
    inputs = model_inputs(directory, name)
    assert inputs["input_ids"].dtype == np.int64
    flowc.submit(path, None, "-O", "3")
    ours = flowc.execute(path.with_suffix(".fca"), inputs)["hidden_states"]
    reference = onnxruntime_outputs(path, inputs)["hidden_states"]
    assert_close(ours, reference)
    # The reference changes with the tokens, so matching it means reading them.
    shifted = dict(inputs, input_ids=np.roll(inputs["input_ids"], 1, axis=-1))
    other = onnxruntime_outputs(path, shifted)["hidden_states"]
    assert not np.allclose(reference, other, rtol=1e-3, atol=1e-4)
    return ours


def test_gpt2_matches_onnxruntime(flowc, real_models):
    check_transformer(flowc, real_models[13], "gpt2")


def test_bert_matches_onnxruntime(flowc, real_models):
    check_transformer(flowc, real_models[17], "bert")


def test_gpt2_batch_two(flowc, tmp_path):
    out = export_models(tmp_path / "gpt2_b2", 13, transformers=["gpt2"], batch=2, seq=32)
    ours = check_transformer(flowc, out, "gpt2")
    assert not np.allclose(ours[0], ours[1], rtol=1e-3, atol=1e-4)


def test_bert_batch_two_with_padding_mask(flowc, tmp_path):
    """Batch 2 (the second sequence half padding) at a shorter sequence."""
    out = export_models(tmp_path / "bert_b2", 17, transformers=["bert"], batch=2, seq=32)
    ours = check_transformer(flowc, out, "bert")
    assert not np.allclose(ours[0], ours[1], rtol=1e-3, atol=1e-4)
