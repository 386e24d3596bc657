#!/usr/bin/python3
"""Exports small random-weight recurrent models to ONNX (RNN, GRU and LSTM
nodes, with the shape arithmetic torch writes around them).

    /usr/bin/python3 examples/export_recurrent.py OUT_DIR [--models lstm_classifier,...]
                                                  [--opset 14] [--seed 0]

- lstm_classifier: token embedding, a two-layer bidirectional LSTM
  (batch_first), a linear head on the last step;
- gru_tagger: a two-layer GRU over features, a linear head on every step;
- rnn_relu: a reverse-free Elman RNN with ReLU, its final state;
- lstm_states: an LSTM given its initial states, returning its output
  and both final states;
- lstm_speech: a speech encoder's size: 80 mel bands, 100 frames, batch
  4, two LSTM layers of 256.

Runs on Debian's python3-torch (scripts/setup.sh installs it). For each
model writes OUT_DIR/<model>.onnx and OUT_DIR/<model>_<input>.npy for each
input (tokens or input, and h0 and c0 where the model takes them).
"""

import numpy as np
import torch
from torch import nn

from export_torchvision import export_arguments, export_onnx, parse_export_arguments


class LstmClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        self.lstm = nn.LSTM(32, 24, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(48, 5)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out[:, -1])


class GruTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 32, num_layers=2)
        self.head = nn.Linear(32, 7)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out)


class RnnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(12, 20, nonlinearity="relu", batch_first=True)

    def forward(self, x):
        return self.rnn(x)[1]


class LstmStates(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(10, 16)

    def forward(self, x, h0, c0):
        out, (h, c) = self.lstm(x, (h0, c0))
        return out, h, c


class LstmSpeech(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(80, 256, num_layers=2, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def inputs(name: str, generator: torch.Generator):
    """The model's example inputs, by name."""
    if name == "lstm_classifier":
        return {"tokens": torch.randint(0, 100, (3, 12), generator=generator)}
    if name == "gru_tagger":
        return {"input": torch.randn(9, 2, 16, generator=generator)}
    if name == "rnn_relu":
        return {"input": torch.randn(2, 15, 12, generator=generator)}
    if name == "lstm_speech":
        return {"input": torch.randn(4, 100, 80, generator=generator)}
    return {"input": torch.randn(7, 3, 10, generator=generator),
            "h0": torch.randn(1, 3, 16, generator=generator),
            "c0": torch.randn(1, 3, 16, generator=generator)}


MODELS = {"lstm_classifier": LstmClassifier, "gru_tagger": GruTagger, "rnn_relu": RnnRelu,
          "lstm_states": LstmStates, "lstm_speech": LstmSpeech}
OUTPUTS = {"lstm_states": ["output", "h", "c"]}


def main():
    args = parse_export_arguments(export_arguments(__doc__, MODELS, 14))
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"unknown model '{name}' (known: {', '.join(MODELS)})")
        torch.manual_seed(args.seed)
        model = MODELS[name]().eval()
        feeds = inputs(name, torch.Generator().manual_seed(args.seed + 2))
        path = args.out_dir / f"{name}.onnx"
        export_onnx(model, tuple(feeds.values()), path, opset_version=args.opset,
                    input_names=list(feeds), output_names=OUTPUTS.get(name, ["output"]))
        for input_name, value in feeds.items():
            np.save(args.out_dir / f"{name}_{input_name}.npy", value.numpy())
        print(f"wrote {path} ({path.stat().st_size / 2**10:.0f} KiB, opset {args.opset})")


if __name__ == "__main__":
    main()
