#!/usr/bin/python3
"""Exports torchvision models with seeded random weights to ONNX.

    /usr/bin/python3 examples/export_torchvision.py OUT_DIR [--models resnet18,...]
                                                    [--opset 13] [--batch 1] [--seed 0]
                                                    [--keep-batchnorm]

Runs on Debian's python3-torch / python3-torchvision (installed by
scripts/setup.sh). A name is a torchvision.models classifier, a
torchvision.models.segmentation model (lraspp_mobilenet_v3_large, whose
bilinear upsampling exports as Resize) or a torchvision.models.video one
(r3d_18, mc3_18, r2plus1d_18, s3d: 3-D convolutions and pooling over clips
of 8 frames of 112 x 112, their training crop; S3D's last pooling window
needs 16 frames of 224 x 224). For each model writes OUT_DIR/<model>.onnx
and OUT_DIR/<model>_input.npy.

Random initialization can make test vectors useless (ViT's zero-initialized
head gives all-zero logits; ConvNeXt's 1e-6 layer scales mute every block),
so parameters that are constant get seeded noise, and BatchNorm statistics
are re-estimated on seeded random batches before export: activations then
stay normalized through the network, and the outputs depend on the input.

torch's exporter folds BatchNorm into the convolutions before it writes the
file; --keep-batchnorm writes BatchNormalization nodes instead (as other
exporters and training checkpoints do), which flowc folds itself.
"""
import argparse
import inspect
import pathlib

import numpy as np
import torch
import torchvision

DEFAULT_MODELS = ["resnet18", "mobilenet_v3_small", "squeezenet1_1"]


def perturb_constant_parameters(model: torch.nn.Module, seed: int):
    """Adds seeded noise to every parameter whose elements are all equal."""
    noise = torch.Generator().manual_seed(seed + 3)
    with torch.no_grad():
        for parameter in model.parameters():
            flat = parameter.flatten()
            if flat.numel() > 1 and bool(torch.all(flat == flat[0])):
                parameter.add_(torch.randn(parameter.shape, generator=noise) * 0.02)


class SegmentationOutput(torch.nn.Module):
    """A segmentation model's "out" map alone, as one tensor."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def export_onnx(model: torch.nn.Module, args, path: pathlib.Path, **options):
    """torch.onnx.export with the TorchScript exporter on every torch: from
    2.9 torch defaults to the dynamo exporter, which writes other ops at
    another opset; the models here are the same on Debian's torch 1.13 and
    on a GPU machine's newer one."""
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        options["dynamo"] = False
    torch.onnx.export(model, args, str(path), **options)


def export_arguments(doc: str, models, opset: int) -> argparse.ArgumentParser:
    """The exporters' common arguments: OUT_DIR, --models, --opset, --seed."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--models", default=",".join(models))
    parser.add_argument("--opset", type=int, default=opset)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def parse_export_arguments(parser: argparse.ArgumentParser):
    """The parsed arguments, OUT_DIR made and torch held to two threads."""
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    return args


def write_export(model: torch.nn.Module, x: torch.Tensor, out_dir: pathlib.Path, name: str,
                 opset: int, output_name: str, **options):
    """OUT_DIR/<name>.onnx of `model` on `x` (its input named "input"), and
    OUT_DIR/<name>_input.npy holding `x`."""
    path = out_dir / f"{name}.onnx"
    export_onnx(model, (x,), path, opset_version=opset, input_names=["input"],
                output_names=[output_name], **options)
    np.save(out_dir / f"{name}_input.npy", x.numpy())
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, opset {opset})")


def input_shape(name: str, batch: int):
    """An image batch, or for a video model a batch of clips."""
    if not hasattr(torchvision.models.video, name):
        return [batch, 3, 224, 224]
    return [batch, 3, 16, 224, 224] if name == "s3d" else [batch, 3, 8, 112, 112]


def build(name: str, seed: int) -> torch.nn.Module:
    """A classification model by its torchvision.models name, a video one
    (torchvision.models.video), or a segmentation one
    (torchvision.models.segmentation: its backbone random too, nothing
    downloaded; its output is the "out" map)."""
    torch.manual_seed(seed)
    if hasattr(torchvision.models, name):
        model = getattr(torchvision.models, name)(weights=None)
    elif hasattr(torchvision.models.video, name):
        model = getattr(torchvision.models.video, name)(weights=None)
    else:
        model = SegmentationOutput(getattr(torchvision.models.segmentation, name)(
            weights=None, weights_backbone=None))
    perturb_constant_parameters(model, seed)
    has_batchnorm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                        for m in model.modules())
    if has_batchnorm:
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.reset_running_stats()
                module.momentum = None  # cumulative average over the batches
        model.train()
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            # Video models' clips are 8 to 16 frames: 2 a batch.
            batch = 2 if hasattr(torchvision.models.video, name) else 8
            for _ in range(4):
                model(torch.randn(input_shape(name, batch), generator=generator))
    return model.eval()


def main():
    parser = export_arguments(__doc__, DEFAULT_MODELS, 13)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--keep-batchnorm", action="store_true",
                        help="write BatchNormalization nodes (torch folds them otherwise)")
    args = parse_export_arguments(parser)
    for name in args.models.split(","):
        model = build(name, args.seed)
        generator = torch.Generator().manual_seed(args.seed + 2)
        x = torch.randn(input_shape(name, args.batch), generator=generator)
        write_export(model, x, args.out_dir, name, args.opset, "logits",
                     do_constant_folding=True,
                     # PRESERVE exports the eval-mode model as it is,
                     # skipping the exporter's Conv+BatchNorm fusion.
                     training=(torch.onnx.TrainingMode.PRESERVE if args.keep_batchnorm
                               else torch.onnx.TrainingMode.EVAL))


if __name__ == "__main__":
    main()
