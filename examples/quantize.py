#!/usr/bin/env python3
"""Quantizes a float32 ONNX model to 8 bits with onnxruntime's tools, for
trying flowc's quantized path (docs/compiler.md, "Quantized models").

  quantize.py static IN.onnx OUT.onnx   QDQ format: int8 weights, activations
                                        quantized and dequantized in the graph
                                        (calibrated on seeded random inputs)
  quantize.py dynamic IN.onnx OUT.onnx  int8 MatMul weights; activations
                                        quantized at run time
                                        (DynamicQuantizeLinear, MatMulInteger)

Options: --per-channel (static: one scale per output channel), --uint8
(static: uint8 activations and weights instead of int8), --samples N
(calibration inputs, default 8), --seed S.
"""
import argparse
import pathlib
import sys
import tempfile

import numpy as np
import onnx
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process


class RandomInputs(CalibrationDataReader):
    """Seeded random inputs of each graph input's shape: float inputs normal,
    integer ones (token ids, masks) small and non-negative."""

    def __init__(self, model: onnx.ModelProto, samples: int, seed: int):
        rng = np.random.default_rng(seed)
        initializers = {init.name for init in model.graph.initializer}
        specs = []
        for value in model.graph.input:
            if value.name in initializers:
                continue
            tensor = value.type.tensor_type
            shape = [d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim]
            specs.append((value.name, onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type),
                          shape))
        self.batches = iter([
            {name: (rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                    else rng.integers(0, 2, shape).astype(dtype))
             for name, dtype, shape in specs}
            for _ in range(samples)])

    def get_next(self):
        return next(self.batches, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["static", "dynamic"])
    parser.add_argument("input", type=pathlib.Path)
    parser.add_argument("output", type=pathlib.Path)
    parser.add_argument("--per-channel", action="store_true")
    parser.add_argument("--uint8", action="store_true")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    kind = QuantType.QUInt8 if args.uint8 else QuantType.QInt8
    with tempfile.TemporaryDirectory() as scratch:
        prepared = pathlib.Path(scratch) / "prepared.onnx"
        # Shape inference and graph cleanup, as onnxruntime recommends.
        quant_pre_process(str(args.input), str(prepared), skip_symbolic_shape=True)
        large = prepared.stat().st_size > 1 << 30
        if args.mode == "static":
            reader = RandomInputs(onnx.load(prepared, load_external_data=False),
                                  args.samples, args.seed)
            quantize_static(str(prepared), str(args.output), reader,
                            quant_format=QuantFormat.QDQ, per_channel=args.per_channel,
                            activation_type=kind, weight_type=kind,
                            use_external_data_format=large)
        else:
            quantize_dynamic(str(prepared), str(args.output), weight_type=QuantType.QInt8,
                             use_external_data_format=large)
    print(f"wrote {args.output} ({args.output.stat().st_size / 2**20:.1f} MiB, "
          f"{args.mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
