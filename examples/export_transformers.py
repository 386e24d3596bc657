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

from export_torchvision import export_onnx, perturb_constant_parameters

DEFAULT_MODELS = ["bert", "gpt2"]
# Attention as matrix products and a softmax, the graph ONNX exporters have
# long written: newer transformers default to torch's fused
# scaled_dot_product_attention, which the TorchScript exporter lacks at
# opset 13. (transformers 4.30 takes the argument as a plain attribute.)
ATTENTION = "eager"
# The graph transformers 4 exports, on transformers 5 too (LastHiddenState).
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5


def build(name: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    if name == "bert":
        config = transformers.BertConfig(attn_implementation=ATTENTION)
        model = transformers.BertModel(config, add_pooling_layer=False)
    elif name == "gpt2":
        config = transformers.GPT2Config(use_cache=False, attn_implementation=ATTENTION)
        model = transformers.GPT2Model(config)
    else:
        raise SystemExit(f"unknown model '{name}' (known: {', '.join(DEFAULT_MODELS)})")
    model.config.return_dict = False
    perturb_constant_parameters(model, seed)
    return model.eval()


class LastHiddenState(torch.nn.Module):
    """The model's last hidden state, its inputs passed by name: the
    exporter passes them in order, and newer transformers' forward takes
    them in another."""

    def __init__(self, model: torch.nn.Module, names, causal: bool):
        super().__init__()
        self.model = model
        self.names = list(names)
        self.causal = causal

    def forward(self, *inputs):
        named = dict(zip(self.names, inputs))
        if TRANSFORMERS_5:
            named = self.as_transformers_4(named)
        return self.model(**named)[0]

    def as_transformers_4(self, named):
        """transformers 5's mask code exports to ops the TorchScript exporter
        lacks (torch.diff) and to runtime bool casts, and BERT's default
        token types to GatherElements. Given a 4D float mask it adds it to
        the scores as it is: the additive mask transformers 4 built (padding
        and, for a decoder, the future at the float minimum), with all-zero
        token types, exports as transformers 4's models do."""
        ids = named["input_ids"]
        seq = ids.shape[1]
        keep = named.get("attention_mask", torch.ones_like(ids))[:, None, None, :]
        keep = keep.to(torch.float32)
        if self.causal:
            index = torch.arange(seq)
            keep = keep * (index[None, :] <= index[:, None]).to(torch.float32)[None, None]
        named["attention_mask"] = (1.0 - keep) * torch.finfo(torch.float32).min
        if not self.causal:  # BERT's segment embeddings; GPT-2 would add wte(0)
            named.setdefault("token_type_ids", torch.zeros_like(ids))
        return named


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
            export_onnx(LastHiddenState(model, inputs, causal=name == "gpt2"),
                        tuple(inputs.values()), path,
                        opset_version=args.opset,
                        input_names=list(inputs), output_names=["hidden_states"],
                        do_constant_folding=True)
        for input_name, value in inputs.items():
            np.save(args.out_dir / f"{name}_{input_name}.npy", value.numpy())
        print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, opset {args.opset})")


if __name__ == "__main__":
    main()
