#!/usr/bin/env python3
"""Exports a BERT-base encoder and a GPT-2-small decoder with seeded random
weights to ONNX.

    .venv-export/bin/python examples/export_transformers.py OUT_DIR [--models bert,gpt2]
                                          [--opset 13] [--batch 1] [--seq 128]

Needs Debian's python3-torch and Hugging Face `transformers` (pinned in
scripts/requirements-export.txt; scripts/setup.sh installs both into
.venv-export, a venv that sees the system's torch). The models are built from
their default configurations (BERT-base: 12 layers, hidden 768; GPT-2 small:
12 layers, hidden 768, vocabulary 50257), so nothing is downloaded.

For each model writes OUT_DIR/<model>.onnx and OUT_DIR/<model>_<input>.npy
for each graph input. Token ids are seeded random; BERT's attention mask
hides the tail of the second sequence so the mask path is exercised.
LayerNorm parameters (initialized to exactly 1 and 0) get seeded noise, like
every other constant parameter, so they are real weights in the test.
"""
import argparse
import pathlib

import numpy as np
import torch
import transformers

from export_torchvision import perturb_constant_parameters

DEFAULT_MODELS = ["bert", "gpt2"]


def build(name: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    if name == "bert":
        config = transformers.BertConfig()
        model = transformers.BertModel(config, add_pooling_layer=False)
    elif name == "gpt2":
        config = transformers.GPT2Config(use_cache=False)
        model = transformers.GPT2Model(config)
    else:
        raise SystemExit(f"unknown model '{name}' (known: {', '.join(DEFAULT_MODELS)})")
    model.config.return_dict = False
    perturb_constant_parameters(model, seed)
    return model.eval()


def example_inputs(name: str, model, batch: int, seq: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=generator)
    if name == "gpt2":
        return {"input_ids": ids}
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1:
        mask[1, seq // 2:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    for name in args.models.split(","):
        model = build(name, args.seed)
        inputs = example_inputs(name, model, args.batch, args.seq, args.seed)
        path = args.out_dir / f"{name}.onnx"
        with torch.no_grad():
            torch.onnx.export(model, tuple(inputs.values()), str(path),
                              opset_version=args.opset, input_names=list(inputs),
                              output_names=["hidden_states"], do_constant_folding=True)
        for input_name, value in inputs.items():
            np.save(args.out_dir / f"{name}_{input_name}.npy", value.numpy())
        print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, opset {args.opset})")


if __name__ == "__main__":
    main()
