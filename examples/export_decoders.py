#!/usr/bin/python3
"""Exports small random-weight image and audio decoders to ONNX: what their
exports add to the classifiers' graphs.

    /usr/bin/python3 examples/export_decoders.py OUT_DIR [--models dcgan,...]
                                                 [--opset 17] [--seed 0]

- dcgan: a DCGAN generator (ConvTranspose from 1x1 to 32x32, BatchNorm, Tanh);
- unet: a two-level U-Net (MaxPool down, ConvTranspose up, skip Concat);
- style: a fast style-transfer network (ReflectionPad2d, InstanceNorm2d,
  nearest Upsample);
- espcn: a sub-pixel super-resolution net (PixelShuffle: DepthToSpace);
- groupnorm: diffusion-style blocks (GroupNorm, SiLU);
- audio: a 1-D front end (Conv1d, GroupNorm, GELU, MaxPool1d,
  ConvTranspose1d, AvgPool1d).

Runs on Debian's python3-torch (scripts/setup.sh installs it). BatchNorm
statistics are seeded noise, so folding them is exercised. For each model
writes OUT_DIR/<model>.onnx and OUT_DIR/<model>_input.npy.
"""

import torch
from torch import nn

from export_torchvision import export_arguments, parse_export_arguments, write_export


def dcgan():
    layers = []
    for cin, cout, stride, pad in ((64, 128, 1, 0), (128, 64, 2, 1), (64, 32, 2, 1)):
        layers += [nn.ConvTranspose2d(cin, cout, 4, stride, pad, bias=False),
                   nn.BatchNorm2d(cout), nn.ReLU()]
    layers += [nn.ConvTranspose2d(32, 3, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers), (2, 64, 1, 1)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.down2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(32, 16, 2, 2)
        self.out = nn.Conv2d(32, 2, 1)

    def forward(self, x):
        skip = self.down1(x)
        return self.out(torch.cat([skip, self.up(self.down2(skip))], 1))


def style():
    return nn.Sequential(
        nn.ReflectionPad2d(4), nn.Conv2d(3, 16, 9), nn.InstanceNorm2d(16, affine=True),
        nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.InstanceNorm2d(32, affine=True), nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(32, 16, 3, 1, 1),
        nn.InstanceNorm2d(16, affine=True), nn.ReLU(), nn.Conv2d(16, 3, 3, 1, 1)), (1, 3, 64, 64)


def espcn():
    return nn.Sequential(nn.Conv2d(1, 64, 5, padding=2), nn.Tanh(),
                         nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
                         nn.Conv2d(32, 9, 3, padding=1), nn.PixelShuffle(3)), (1, 1, 32, 32)


def groupnorm():
    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.GroupNorm(8, 64), nn.SiLU(),
                         nn.Conv2d(64, 64, 3, padding=1), nn.GroupNorm(32, 64),
                         nn.SiLU()), (2, 3, 16, 16)


def audio():
    return nn.Sequential(nn.Conv1d(1, 16, 9, 4, 4), nn.GroupNorm(4, 16), nn.GELU(),
                         nn.MaxPool1d(2), nn.ConvTranspose1d(16, 8, 4, 2, 1),
                         nn.AvgPool1d(2)), (2, 1, 400)


MODELS = {"dcgan": dcgan, "unet": lambda: (UNet(), (1, 3, 32, 32)), "style": style,
          "espcn": espcn, "groupnorm": groupnorm, "audio": audio}


def main():
    args = parse_export_arguments(export_arguments(__doc__, MODELS, 17))
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"unknown model '{name}' (known: {', '.join(MODELS)})")
        torch.manual_seed(args.seed)
        model, shape = MODELS[name]()
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.running_mean.normal_()
                    module.running_var.uniform_(0.5, 2.0)
        model.eval()
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(args.seed + 2))
        write_export(model, x, args.out_dir, name, args.opset, "output")


if __name__ == "__main__":
    main()
