#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (fuzz/corpus/<target>/, committed).

    .venv/bin/python scripts/fuzz_seeds.py [--bin build/bin] [--out fuzz/corpus]

- onnx: every op case of tests/e2e/test_ops.py, test_recurrent.py and
  test_einsum.py, the example models, ONNX's
  own backend node tests (shipped in the onnx wheel) of at most 2 KB, and
  models whose initializers live in the harness's "weights.bin".
- npy: numpy.save of each dtype flowc reads, in format versions 1-3.
- artifact: `flowc submit` (packed and --thin) of small models.
- repro: `flowc repro` of the same models, repro.json and graph.mlirbc
  joined by the separator that fuzz/fuzz_repro.cpp splits at.
- request: SubmitRequest, InspectRequest and ReproRequest messages as the
  CLI sends them, encoded by protoc from text format.

The script starts its own daemon on a temp socket and cache. The names are
digests of the contents, as libFuzzer names its corpus files.
"""
import argparse
import hashlib
import io
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "examples"))

REPRO_SEPARATOR = b"\n--flowc-fuzz-graph--\n"
NODE_TEST_MAX_BYTES = 2048


def put(out: pathlib.Path, data: bytes):
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()).write_bytes(data)


def external_model(name, location, offset, length, shape):
    """y = x + w with w's bytes at `location` (the harness's weights.bin)."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=shape)
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(length))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


def onnx_seeds(out: pathlib.Path, work: pathlib.Path):
    import make_models
    import test_einsum
    import test_ops
    import test_recurrent
    import test_selection
    models = {}
    for name, case in sorted(test_ops.CASES.items()):
        models[name] = case()[0]
    for name, case in sorted(test_recurrent.CASES.items()):
        models[name] = test_recurrent.recurrent_model(**case)[0]
    for equation, shapes in sorted(test_einsum.CASES.items()):
        models[f"einsum {equation}"] = test_einsum.einsum_model(equation, shapes)
    models["selection"] = test_selection.model_of(test_selection.build_cases())
    rng = np.random.default_rng(7)
    models["example_cnn"] = make_models.make_cnn(rng)
    models["example_mlp"] = make_models.make_mlp(rng)
    models["external_whole"] = external_model("ext", "weights.bin", 0, 64, [4, 4])
    models["external_offset"] = external_model("ext", "weights.bin", 4096 - 32, 32, [8])
    for name, model in models.items():
        data = model.SerializeToString()
        put(out, data)
        (work / f"{name}.onnx").write_bytes(data)
    node_dir = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    for model in sorted(node_dir.glob("*/model.onnx")):
        data = model.read_bytes()
        if len(data) <= NODE_TEST_MAX_BYTES:
            put(out, data)
    return [work / f"{name}.onnx" for name in ("example_mlp", "conv_same_upper",
                                               "constant_node_operand")
            if (work / f"{name}.onnx").exists()]


def npy_seeds(out: pathlib.Path):
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, -2], np.int64),
              np.arange(8, dtype=np.int32).reshape(2, 2, 2), np.array([True, False]),
              np.float32(3.5), np.zeros((0, 4), np.float32), np.ones(3, np.float16),
              np.array([-128, 127], np.int8), np.array([0, 255], np.uint8)]
    for array in arrays:
        for version in ((1, 0), (2, 0), (3, 0)):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asarray(array), version=version)
            put(out, buffer.getvalue())
    # Refused ones: Fortran order and a dtype flowc does not read.
    for array in (np.asfortranarray(np.ones((2, 3), np.float32)), np.ones(3, np.float64)):
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, array)
        put(out, buffer.getvalue())


REQUESTS = [
    ("SubmitRequest", 'model_path: "/models/cnn.onnx" options { target: TARGET_CPU opt_level: 2 }'),
    ("SubmitRequest", 'model_path: "/m/bert.onnx" options { opt_level: 3 precision: PRECISION_BF16 } '
                      'priority: 1 input_shapes { name: "input_ids" dims: 1 dims: 128 } '
                      'input_shapes { name: "mask" dims: 1 dims: 128 } want_local_path: true'),
    ("SubmitRequest", 'model_path: "/m/x.onnx" thin: true options { opt_level: 0 '
                      'disabled_passes: "flowc-derive-weights" print_ir_after: "all" }'),
    ("InspectRequest", 'model_path: "/m/repro_dir" input_shapes { name: "x" dims: 2 }'),
    ("ReproRequest", 'model_path: "/m/x.onnx" options { target: TARGET_CPU opt_level: 1 '
                     'precision: PRECISION_FP32 } input_shapes { name: "x" dims: 4 dims: 3 }'),
]


def request_seeds(out: pathlib.Path):
    for message, text in REQUESTS:
        encoded = subprocess.run(
            ["protoc", f"--encode=flowc.v1.{message}", "--proto_path", str(ROOT / "proto"),
             "flowc/v1/flowc.proto"], input=text.encode(), check=True,
            capture_output=True).stdout
        put(out, encoded)


def flowc_seeds(flowc_bin: pathlib.Path, models, artifact_out, repro_out, work):
    base = [str(flowc_bin / "flowc"), "--cache-dir", str(work / "cache"), "--socket",
            str(work / "flowcd.sock")]
    subprocess.run(base + ["daemon", "start"], check=True, capture_output=True, timeout=60)
    try:
        for model in models:
            for extra in ([], ["--thin"]):
                fca = work / f"{model.stem}{'-thin' if extra else ''}.fca"
                subprocess.run(base + ["submit", str(model), "-o", str(fca), *extra],
                               check=True, capture_output=True, timeout=300)
                put(artifact_out, fca.read_bytes())
            repro = work / f"{model.stem}.repro"
            subprocess.run(base + ["repro", str(model), "-o", str(repro)], check=True,
                           capture_output=True, timeout=300)
            put(repro_out, (repro / "repro.json").read_bytes() + REPRO_SEPARATOR +
                (repro / "graph.mlirbc").read_bytes())
    finally:
        subprocess.run(base + ["daemon", "stop"], capture_output=True, timeout=60)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", type=pathlib.Path, default=ROOT / "build" / "bin")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "fuzz" / "corpus")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for target in ("onnx", "npy", "artifact", "repro", "request"):
            shutil.rmtree(args.out / target, ignore_errors=True)
        models = onnx_seeds(args.out / "onnx", work)
        npy_seeds(args.out / "npy")
        request_seeds(args.out / "request")
        flowc_seeds(args.bin, models, args.out / "artifact", args.out / "repro", work)


if __name__ == "__main__":
    main()
