"""flowc.compile: a model file, an onnx.ModelProto or a torch.nn.Module to an
Artifact, through the daemon's Submit stream."""
import contextlib
import os
import pathlib
import sys
import tempfile

import grpc

from . import errors
from ._daemon import Connection, artifact_size, client_identity, fetch_artifact, place_artifact
from .artifact import Artifact

# Protobuf refuses to serialize a message of 2 GiB or more.
PROTOBUF_LIMIT = 2**31 - 1
ONNX_OPSET = 17

_default_connection = None


def default_connection():
    """The process's connection to the default daemon (FLOWC_SOCKET /
    FLOWC_CACHE_DIR / XDG, as the CLI)."""
    global _default_connection
    if _default_connection is None:
        _default_connection = Connection()
    return _default_connection


def _is_model_proto(model):
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(model, onnx.ModelProto)


def _is_torch_module(model):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _unloaded_external_data(model):
    """Names of initializers whose bytes are in files this proto only
    points to (loaded with load_external_data=False)."""
    from onnx import TensorProto

    return [t.name for t in model.graph.initializer
            if t.data_location == TensorProto.EXTERNAL and not t.HasField("raw_data")]


def _save_model_proto(model, directory):
    """Writes `model` as directory/model.onnx; its weights as external data
    (directory/model.onnx.data) when the proto would reach protobuf's 2 GB
    limit. The caller's proto is left as it was."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    path = directory / "model.onnx"
    unloaded = _unloaded_external_data(model)
    if unloaded:
        raise errors.InvalidModel(
            f"the ModelProto's initializer '{unloaded[0]}' refers to external data that is "
            "not loaded: load the model with onnx.load(path) (external data included), or "
            "pass the model's path")
    if model.ByteSize() < PROTOBUF_LIMIT:
        onnx.save(model, str(path))
        return path
    # save_as_external_data moves raw_data out of the proto before it is
    # serialized: nothing near 2 GB is ever one message. It does so in the
    # caller's proto; the bytes are read back into it afterwards.
    unset = [t for t in model.graph.initializer if not t.HasField("data_location")]
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=1024)
    load_external_data_for_model(model, str(directory))
    for tensor in unset:
        tensor.ClearField("data_location")
    return path


def _export_torch(module, example_inputs, directory):
    """torch.onnx.export at opset 17 with the TorchScript exporter, as the
    repo's exporters do; input names are the example dict's keys, else
    input_0, input_1, ..."""
    import inspect

    import torch

    if example_inputs is None:
        raise errors.InvalidModel("compiling a torch.nn.Module needs example_inputs "
                                  "(a tensor, a tuple of tensors or a dict name -> tensor)")
    if isinstance(example_inputs, dict):
        names, args = list(example_inputs), tuple(example_inputs.values())
    elif isinstance(example_inputs, (tuple, list)):
        args = tuple(example_inputs)
        names = [f"input_{i}" for i in range(len(args))]
    else:
        args, names = (example_inputs,), ["input_0"]
    path = directory / "model.onnx"
    options = {"opset_version": ONNX_OPSET, "input_names": names, "do_constant_folding": True}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        options["dynamo"] = False
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            torch.onnx.export(module, args, str(path), **options)
    except Exception as error:
        raise errors.Unsupported(f"torch.onnx.export failed: {error}",
                                 kind="unimplemented") from error
    finally:
        module.train(was_training)
    return path


def _model_path(model, example_inputs, directory):
    if isinstance(model, (str, os.PathLike)):
        path = pathlib.Path(model).absolute()
        if not path.exists():
            raise errors.NotFound(f"cannot read model '{model}': no such file",
                                  kind="not_found", file=str(path))
        if not path.is_file() and not path.is_dir():
            raise errors.InvalidModel(f"cannot read model '{model}': not a regular file",
                                      file=str(path))
        return path
    if _is_model_proto(model):
        return _save_model_proto(model, directory())
    if _is_torch_module(model):
        return _export_torch(model, example_inputs, directory())
    raise errors.InvalidModel(f"cannot compile a {type(model).__module__}."
                              f"{type(model).__name__}: pass a path, an onnx.ModelProto "
                              "or a torch.nn.Module")


# The spellings flowc submit takes, as flowc.v1's enum value names.
_TARGETS = {"cpu": "TARGET_CPU", "cuda": "TARGET_CUDA_SM90",
            **{f"cuda:sm_{cc}": f"TARGET_CUDA_SM{cc}"
               for cc in (75, 80, 86, 89, 90, 100, 120)}}
_PRECISIONS = {"fp32": "PRECISION_FP32", "bf16": "PRECISION_BF16", "fp16": "PRECISION_FP16"}


def _wire_enum(what, name, names, flowc_pb2):
    if name not in names:
        raise errors.error("invalid_argument",
                           f"unknown {what} '{name}' (supported: {', '.join(names)})")
    return getattr(flowc_pb2, names[name])


def _request(path, *, target, opt_level, precision, input_shapes, thin, explain, timeout,
             disabled_passes, batch):
    from .v1 import flowc_pb2

    request = flowc_pb2.SubmitRequest(model_path=str(path), want_local_path=True,
                                      client=client_identity(), thin=bool(thin),
                                      explain=bool(explain))
    # flowc submit's defaults, always sent: an unset opt_level is -O0 (the
    # reference loops) to the daemon, and the same options as the CLI's
    # make the same cache entry.
    options = request.options
    options.target = _wire_enum("target", target or "cpu", _TARGETS, flowc_pb2)
    options.opt_level = 2 if opt_level is None else int(opt_level)
    options.precision = _wire_enum("precision", precision or "fp32", _PRECISIONS, flowc_pb2)
    options.disabled_passes.extend(disabled_passes or ())
    if timeout:
        request.timeout_seconds = float(timeout)
    request.priority = flowc_pb2.PRIORITY_BATCH if batch else flowc_pb2.PRIORITY_INTERACTIVE
    for name, dims in (input_shapes or {}).items():
        request.input_shapes.add(name=name, dims=[int(d) for d in dims])
    return request


class _Progress:
    """A tqdm bar over the kernels (kernel_index of kernel_count), the phase
    (and pass or kernel) as its description; tqdm.auto draws a widget in a
    notebook and a line on a terminal."""

    def __init__(self, enabled, label):
        self._bar = None
        self._enabled = enabled
        self._label = label

    def update(self, progress):
        if not self._enabled:
            return
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=None, desc=self._label, unit="kernel", leave=False,
                             dynamic_ncols=True)
        what = getattr(progress, "pass")  # A Python keyword as a field name.
        detail = progress.kernel or what or progress.detail
        self._bar.set_description_str(f"{self._label} {progress.stage}"
                                      + (f": {detail}" if detail else ""), refresh=False)
        if progress.kernel_count:
            if self._bar.total != progress.kernel_count:
                self._bar.total = progress.kernel_count
            self._bar.n = progress.kernel_index
        if progress.eta_seconds > 0:
            self._bar.set_postfix_str(f"eta {progress.eta_seconds:.1f}s", refresh=False)
        self._bar.refresh()

    def close(self):
        if self._bar is not None:
            self._bar.close()


def compile(model, example_inputs=None, *, output=None, target="cpu", opt_level=2,
            precision="fp32", input_shapes=None, thin=False, explain=False, timeout=None,
            disabled_passes=(), batch=False, progress=True, threads=0, gpu_device=0,
            connection=None, on_event=None):
    """Compiles `model` (a path to an ONNX/MLIR model or reproducer, an
    onnx.ModelProto, or a torch.nn.Module with `example_inputs`) with the
    local daemon, starting it if none runs. Returns an Artifact.

    Options as `flowc submit`'s: target, opt_level, precision, input_shapes
    ({name: dims}), thin, explain, timeout (seconds, the job's limit),
    disabled_passes, batch. `output`: where to place the artifact (a hard
    link to the daemon's cache file where possible); by default the
    artifact is opened where the daemon's cache keeps it. `progress`: a tqdm
    bar; `on_event(flowc_pb2.SubmitEvent)` sees every event. Ctrl-C
    (KeyboardInterrupt) cancels the RPC, and so the daemon's job, then
    propagates. `threads` and `gpu_device` are the Artifact's (the GPU a
    CUDA artifact runs on). Raises flowc.FlowcError subclasses."""
    conn = connection or default_connection()
    with contextlib.ExitStack() as stack:
        def directory():
            return pathlib.Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="flowc-model-")))

        path = _model_path(model, example_inputs, directory)
        request = _request(path, target=target, opt_level=opt_level, precision=precision,
                           input_shapes=input_shapes, thin=thin, explain=explain,
                           timeout=timeout, disabled_passes=disabled_passes, batch=batch)
        result, job_id = _submit(conn, request, _Progress(progress, path.name), on_event)
    digest = result.artifact_digest
    placed = result.artifact_path
    if output is not None:
        output = pathlib.Path(output).absolute()
        if not place_artifact(result.artifact_path, artifact_size(digest), output):
            fetch_artifact(conn, digest, output)
        placed = str(output)
    elif not place_artifact_readable(placed, artifact_size(digest)):
        # No local file to open (a remote daemon, or evicted already).
        out_dir = pathlib.Path(conn.cache_dir) / "client" / "artifacts"
        out_dir.mkdir(parents=True, exist_ok=True)
        placed = str(out_dir / (digest.split(":")[-1].split("/")[0] + ".fca"))
        fetch_artifact(conn, digest, placed)
    summary = {"job_id": job_id, "cache_hit": result.cache_hit,
               "code_cache_hit": result.code_cache_hit, "seconds": result.seconds,
               "kernels_compiled": result.kernels_compiled,
               "kernels_reused": result.kernels_reused, "model_digest": result.model_digest,
               "explain": result.explain}
    return Artifact(placed, digest=digest, result=summary, cache_dir=conn.cache_dir,
                    threads=threads, gpu_device=gpu_device)


def place_artifact_readable(path, size):
    try:
        return bool(path) and os.path.getsize(path) == size and os.access(path, os.R_OK)
    except OSError:
        return False


def _submit(conn, request, bar, on_event):
    """Reads the Submit stream to its result; (result, job id)."""
    call = conn.compiler().Submit(request)
    job_id, result = "", None
    try:
        for event in call:
            which = event.WhichOneof("event")
            if which == "accepted":
                job_id = event.accepted.job_id
            elif which == "result":
                result = event.result
                job_id = result.job_id or job_id
                continue
            elif which == "progress":
                bar.update(event.progress)
            if on_event:
                on_event(event)
    except KeyboardInterrupt:
        # The daemon cancels a job whose client went away.
        call.cancel()
        raise
    except grpc.RpcError as rpc:
        raise errors.from_rpc(rpc, job_id=job_id) from None
    finally:
        bar.close()
    if result is None:
        raise errors.Internal(f"the daemon ended the submit of '{request.model_path}' "
                              "without a result")
    return result, job_id
