#!/usr/bin/env python3
"""Exports small (two-block) random-weight models of more transformer
families to ONNX: what their exports add to BERT's and GPT-2's graphs.

    .venv-export/bin/python examples/export_transformer_families.py OUT_DIR
                                          [--models roberta,t5,...] [--opset 17]

- roberta: position ids from the padding mask (CumSum of int32, integer
  Mul and Add);
- t5: relative-position buckets (integer Abs, Min, Where, float Log cast
  to int64);
- llama: rotary embeddings, a causal mask from float compares cast to bool;
- opt, bloom: learned positions from a mask's running sum; BLOOM's ALiBi
  (ScatterND on constant indices);
- mobilebert: embeddings of shifted token windows (a backwards Slice, Pad
  with computed pads);
- deberta: disentangled attention;
- whisper: the audio encoder (1-D convolutions);
- swin: shifted windows (strided slices, Mod, a ScatterND-built mask).

Needs Debian's python3-torch and the pinned Hugging Face `transformers` in
.venv-export (scripts/setup.sh). Models are built from configurations,
nothing is downloaded. For each model writes OUT_DIR/<model>.onnx and
OUT_DIR/<model>_input.npy (batch 2; token ids end in padding in the second
row).
"""

import torch
import transformers as hf

from export_torchvision import (export_arguments, parse_export_arguments,
                                perturb_constant_parameters, write_export)

SEQ = 32


def build(name: str):
    """The model and its input's kind: "ids", "image" or "audio"."""
    # Two blocks, hidden 256, a vocabulary of 1000: a few MiB each.
    small = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
             "intermediate_size": 512, "vocab_size": 1000}
    if name == "roberta":
        return hf.RobertaModel(hf.RobertaConfig(**small), add_pooling_layer=False), "ids"
    if name == "t5":
        return hf.T5EncoderModel(hf.T5Config(num_layers=2, d_model=256, d_ff=512, d_kv=64,
                                             num_heads=4, vocab_size=1000)), "ids"
    if name == "llama":
        return hf.LlamaModel(hf.LlamaConfig(**small)), "ids"
    if name == "opt":
        return hf.OPTModel(hf.OPTConfig(num_hidden_layers=2, hidden_size=256, ffn_dim=512,
                                        num_attention_heads=4, word_embed_proj_dim=256,
                                        vocab_size=1000)), "ids"
    if name == "bloom":
        return hf.BloomModel(hf.BloomConfig(n_layer=2, hidden_size=256, n_head=4,
                                            vocab_size=1000)), "ids"
    if name == "mobilebert":
        return hf.MobileBertModel(hf.MobileBertConfig(num_hidden_layers=2, vocab_size=1000),
                                  add_pooling_layer=False), "ids"
    if name == "deberta":
        return hf.DebertaV2Model(hf.DebertaV2Config(**small)), "ids"
    if name == "whisper":
        config = hf.WhisperConfig(encoder_layers=2, decoder_layers=2, num_mel_bins=16,
                                  max_source_positions=64)
        return hf.WhisperModel(config).encoder, "audio"
    if name == "swin":
        config = hf.SwinConfig(image_size=64, patch_size=4, window_size=4, embed_dim=32,
                               depths=[2, 2], num_heads=[2, 4])
        return hf.SwinModel(config, add_pooling_layer=False), "image"
    raise SystemExit(f"unknown model '{name}' (known: {', '.join(MODELS)})")


MODELS = ["roberta", "t5", "llama", "opt", "bloom", "mobilebert", "deberta", "whisper",
          "swin"]


class FirstOutput(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, return_dict=False)[0]


def example_input(kind: str, model, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed + 2)
    if kind == "image":
        return torch.randn(2, 3, 64, 64, generator=generator)
    if kind == "audio":
        frames = 2 * model.config.max_source_positions
        return torch.randn(2, model.config.num_mel_bins, frames, generator=generator)
    ids = torch.randint(3, model.config.vocab_size, (2, SEQ), generator=generator)
    # Padding ends the second row: RoBERTa's positions skip it.
    ids[1, SEQ // 2:] = model.config.pad_token_id or 0
    return ids


def main():
    args = parse_export_arguments(export_arguments(__doc__, MODELS, 17))
    for name in args.models.split(","):
        torch.manual_seed(args.seed)
        model, kind = build(name)
        perturb_constant_parameters(model, args.seed)
        model.eval()
        x = example_input(kind, model, args.seed)
        with torch.no_grad():
            write_export(FirstOutput(model), x, args.out_dir, name, args.opset,
                         "hidden_states", do_constant_folding=True)


if __name__ == "__main__":
    main()
