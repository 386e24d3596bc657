"""Fixtures for flowc's end-to-end tests: the real binaries, a daemon on a
temp socket with a temp cache, and helpers to compile and run models."""
import concurrent.futures
import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("FLOWC_BIN_DIR", ROOT / "build" / "bin"))
sys.path.insert(0, str(ROOT / "examples"))


class Flowc:
    """Runs the flowc CLI against one daemon and cache."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        self.cache_dir = tmp / "cache"
        self.socket = tmp / "flowcd.sock"

    def run(self, *args, check=True):
        cmd = [str(BIN / "flowc"), "--cache-dir", str(self.cache_dir), "--socket",
               str(self.socket), *map(str, args)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr}")
        return result

    def submit(self, model: pathlib.Path, out: pathlib.Path = None, *options) -> dict:
        out = out or model.with_suffix(".fca")
        return json.loads(self.run("submit", model, "-o", out, "--json", *options).stdout)

    def input_args(self, artifact: pathlib.Path, inputs: dict) -> list:
        """`--input NAME=FILE.npy` for each of `inputs` (name -> array),
        saved beside the other temporaries; floats other than float16 as
        float32 (the dtypes `flowc run` reads stay as they are)."""
        args = []
        for i, (name, value) in enumerate(inputs.items()):
            path = self.tmp / f"{artifact.stem}_in{i}.npy"
            keep = value.dtype in (np.int64, np.int32, np.int8, np.uint8, np.bool_, np.float16)
            np.save(path, value if keep else value.astype(np.float32))
            args += ["--input", f"{name}={path}"]
        return args

    def execute(self, artifact: pathlib.Path, inputs: dict) -> dict:
        """Runs `artifact` with `inputs` (name -> array); returns name -> array."""
        out_dir = self.tmp / ("out_" + artifact.stem)
        report = json.loads(self.run("run", artifact, *self.input_args(artifact, inputs),
                                     "--output-dir", out_dir, "--json").stdout)
        return {o["name"]: np.load(o["file"]) for o in report["outputs"]}


@contextlib.contextmanager
def tmpfs_mount(directory: pathlib.Path, size: str):
    """A tmpfs of `size` (e.g. "64m") mounted at `directory`, made here;
    skips the test where mounting is not permitted (tests run as root)."""
    directory.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                             str(directory)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item, for fixtures' teardown."""
    report = yield
    setattr(item, "report_" + report.when, report)
    return report


@pytest.fixture
def flowc(tmp_path, request):
    client = Flowc(tmp_path)
    client.run("daemon", "start")
    yield client
    client.run("daemon", "stop", check=False)
    # A passed test's cache (CAS copies of weights, artifacts: GBs for the
    # transformers) goes at once, so the suite's disk use does not add up;
    # a failed one's stays for its log.
    report = getattr(request.node, "report_call", None)
    if report is not None and report.passed:
        shutil.rmtree(client.cache_dir, ignore_errors=True)


def model_inputs(directory, name) -> dict:
    """The inputs export_models saved beside the export `name`: input name ->
    array."""
    return {path.name[len(name) + 1:-4]: np.load(path)
            for path in sorted(directory.glob(f"{name}_*.npy"))}


def main_after_derive_weights(flowc, model, out) -> tuple:
    """@main's signature line after flowc-derive-weights (compiling `model`
    to `out`), and that line with each derived weight's recipe text taken
    out: the types @main binds."""
    ir = flowc.run("submit", model, "-o", out, "--print-ir-after",
                   "flowc-derive-weights").stderr
    main = next(line for line in ir.splitlines() if "func.func @main" in line)
    return main, re.sub(r'flowc\.recipe = "[^"]*"', "", main)


def onnxruntime_outputs(model_path, inputs: dict) -> dict:
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, inputs)))


def assert_close(actual, expected, rtol=1e-4):
    """Max relative error <= rtol, relative to the output's largest magnitude:
    max|actual - expected| / max|expected|. (Per-element ratios are
    meaningless where a long fp32 sum cancels to near zero, and summation
    order legitimately differs between implementations.)"""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(float(np.max(np.abs(expected))), 1e-30)
    error = float(np.max(np.abs(actual.astype(np.float64) - expected))) / scale
    assert error <= rtol, f"max relative error {error:.3g} > {rtol}"
    return error


def skip_without_cuda_toolkit():
    """The cuda targets are built where CMake found the toolkit (ptxas on
    the PATH or in /usr/local/cuda); elsewhere a compile for them is refused
    (docs/cuda.md) and a CUDA test has nothing to check."""
    if not (shutil.which("ptxas") or pathlib.Path("/usr/local/cuda/bin/ptxas").exists()):
        pytest.skip("no CUDA toolkit (ptxas) on this machine: the cuda targets are left out")


def device_target():
    """cuda:sm_NN of GPU 0 (nvidia-smi), or None and why there is none."""
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=60)
    except OSError as error:
        return None, f"no NVIDIA GPU here (nvidia-smi: {error.strerror})"
    lines = answer.stdout.split()
    if answer.returncode != 0 or not lines:
        return None, f"no NVIDIA GPU here (nvidia-smi: {answer.stderr.strip()})"
    return "cuda:sm_" + lines[0].replace(".", ""), None


def save(model, path: pathlib.Path) -> pathlib.Path:
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def leaky_cnn(rng, batch=1):
    """make_models' CNN with its second activation a LeakyRelu, which no
    convolution kernel absorbs: one generated loop kernel (a codegen task)
    besides the library calls. The plain CNN is library calls only."""
    import make_models
    model = make_models.make_cnn(rng, batch)
    for node in model.graph.node:
        if node.name == "relu2":
            node.op_type = "LeakyRelu"
            node.attribute.append(onnx.helper.make_attribute("alpha", 0.1))
    return model


TORCHVISION_MODELS = ["resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0",
                      "squeezenet1_1", "vit_b_16", "convnext_tiny",
                      "lraspp_mobilenet_v3_large"]
TRANSFORMER_MODELS = ["bert", "gpt2"]
EXPORT_OPSETS = (13, 17)


def export_models(out: pathlib.Path, opset: int, torchvision=(), transformers=(),
                  batch=1, seq=128, keep_batchnorm=False):
    """Exports the named models with seeded random weights into `out`."""
    if torchvision:
        subprocess.run(["/usr/bin/python3", str(ROOT / "examples" / "export_torchvision.py"),
                        str(out), "--models", ",".join(torchvision), "--opset", str(opset),
                        "--batch", str(batch)] + (["--keep-batchnorm"] if keep_batchnorm else []),
                       check=True, capture_output=True, text=True, timeout=1800)
    if transformers:
        subprocess.run([str(ROOT / ".venv-export" / "bin" / "python"),
                        str(ROOT / "examples" / "export_transformers.py"), str(out),
                        "--models", ",".join(transformers), "--opset", str(opset),
                        "--batch", str(batch), "--seq", str(seq)],
                       check=True, capture_output=True, text=True, timeout=1800)
    return out


@pytest.fixture(scope="session")
def real_models(tmp_path_factory):
    """The ingest issue's real-model set at batch 1, exported at opsets 13
    and 17: {opset: directory}. Generated here, never committed."""
    root = tmp_path_factory.mktemp("real_models")
    jobs = [(opset, kind) for opset in EXPORT_OPSETS for kind in ("torchvision", "transformers")]

    def export(job):
        opset, kind = job
        names = {kind: TORCHVISION_MODELS if kind == "torchvision" else TRANSFORMER_MODELS}
        export_models(root / f"opset{opset}", opset, **names)

    # Exports are mostly single-threaded Python: two at a time.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(export, jobs))
    return {opset: root / f"opset{opset}" for opset in EXPORT_OPSETS}
