"""ctypes binding of the runtime's C API (runtime/include/flowc/runtime/
c_api.h, libflowc_runtime_c.so): artifacts run in this process, on numpy
arrays' own memory."""
import ctypes
import json
import os
import pathlib
import shutil
import threading

import numpy as np

from . import errors

LIBRARY = "libflowc_runtime_c.so"
API_VERSION = 2


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("rank", ctypes.c_size_t), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("byte_size", ctypes.c_uint64)]


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("rank", ctypes.c_size_t), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("data", ctypes.c_void_p), ("byte_size", ctypes.c_uint64)]


def bin_dir():
    """Where flowc's binaries are: FLOWC_BIN_DIR, else the directory of the
    `flowc` on PATH; None if neither."""
    if os.environ.get("FLOWC_BIN_DIR"):
        return pathlib.Path(os.environ["FLOWC_BIN_DIR"])
    found = shutil.which("flowc")
    return pathlib.Path(found).resolve().parent if found else None


def library_path():
    """FLOWC_RUNTIME_LIB, else lib/ beside the binaries' bin/ (the build
    tree's build/lib), else the binaries' own directory."""
    if os.environ.get("FLOWC_RUNTIME_LIB"):
        return pathlib.Path(os.environ["FLOWC_RUNTIME_LIB"])
    where = bin_dir()
    candidates = [where.parent / "lib" / LIBRARY, where / LIBRARY] if where else []
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise errors.NotFound(
        f"cannot find {LIBRARY} (looked in {', '.join(map(str, candidates)) or 'nothing'}): "
        "set FLOWC_RUNTIME_LIB to it, or FLOWC_BIN_DIR to flowc's bin directory")


_lock = threading.Lock()
_lib = None


def lib():
    """The loaded C API, bound once per process."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = _bind(ctypes.CDLL(str(library_path())))
        return _lib


def _bind(c):
    c.flowc_c_api_version.restype = ctypes.c_int
    if c.flowc_c_api_version() != API_VERSION:
        raise errors.FailedPrecondition(
            f"{c._name} has C API version {c.flowc_c_api_version()}, this package "
            f"needs {API_VERSION}: install the package of the same flowc build")
    c.flowc_last_error.restype = ctypes.c_char_p
    status = ctypes.c_int
    signatures = {
        "flowc_artifact_open": [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                ctypes.POINTER(ctypes.c_void_p)],
        "flowc_artifact_input_count": [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)],
        "flowc_artifact_output_count": [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)],
        "flowc_artifact_input": [ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.POINTER(_TensorInfo)],
        "flowc_artifact_output": [ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.POINTER(_TensorInfo)],
        "flowc_artifact_metadata": [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)],
        "flowc_session_create_on_gpu": [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_void_p)],
        "flowc_session_run": [ctypes.c_void_p, ctypes.POINTER(_Tensor), ctypes.c_size_t,
                              ctypes.POINTER(_Tensor), ctypes.c_size_t],
    }
    for name, argtypes in signatures.items():
        function = getattr(c, name)
        function.argtypes = argtypes
        function.restype = status
    for name in ("flowc_artifact_close", "flowc_session_close"):
        getattr(c, name).argtypes = [ctypes.c_void_p]
        getattr(c, name).restype = None
    return c


def _check(c, code):
    if code != 0:
        raise errors.from_status(code, c.flowc_last_error().decode("utf-8", "replace"))


class TensorSpec:
    """An input or output of an artifact: name, dtype (numpy's name) and
    shape."""

    __slots__ = ("name", "dtype", "shape", "byte_size", "_c_name", "_c_dtype", "_c_shape",
                 "_np_dtype")

    def __init__(self, info):
        self.name = info.name.decode()
        self.dtype = info.dtype.decode()
        self.shape = tuple(info.shape[i] for i in range(info.rank))
        self.byte_size = info.byte_size
        # What a run passes for a tensor of exactly this spec, made once:
        # building them per call is most of the binding's cost.
        self._c_name, self._c_dtype = info.name, info.dtype
        self._c_shape = _shape_pointer(self.shape)
        try:
            self._np_dtype = np.dtype(self.dtype)
        except TypeError:
            self._np_dtype = None

    def to_dict(self):
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    def __repr__(self):
        return f"TensorSpec({self.name!r}, {self.dtype}, {list(self.shape)})"


def _shape_pointer(shape):
    return ctypes.cast((ctypes.c_int64 * max(len(shape), 1))(*shape),
                       ctypes.POINTER(ctypes.c_int64))


def _numpy_dtype(spec):
    if spec._np_dtype is None:
        raise errors.Unsupported(f"{spec.name!r} is {spec.dtype}, which numpy has no type "
                                 "for", kind="unimplemented")
    return spec._np_dtype


class RuntimeArtifact:
    """An opened artifact and, once run, its session. Thread-safe: runs are
    serialized by the C API."""

    def __init__(self, path, cache_dir=None, verify=True):
        self._c = lib()
        handle = ctypes.c_void_p()
        _check(self._c, self._c.flowc_artifact_open(
            os.fsencode(path), os.fsencode(cache_dir) if cache_dir else None,
            0 if verify else 1, ctypes.byref(handle)))
        self._artifact = handle
        self._session = None
        self._session_lock = threading.Lock()
        self.inputs = self._specs(self._c.flowc_artifact_input_count,
                                  self._c.flowc_artifact_input)
        self.outputs = self._specs(self._c.flowc_artifact_output_count,
                                   self._c.flowc_artifact_output)
        self._by_name = {spec.name: spec for spec in self.inputs}
        text = ctypes.c_char_p()
        _check(self._c, self._c.flowc_artifact_metadata(self._artifact, ctypes.byref(text)))
        self.metadata = json.loads(text.value.decode())

    def _specs(self, count_fn, spec_fn):
        count = ctypes.c_size_t()
        _check(self._c, count_fn(self._artifact, ctypes.byref(count)))
        specs = []
        for i in range(count.value):
            info = _TensorInfo()
            _check(self._c, spec_fn(self._artifact, i, ctypes.byref(info)))
            specs.append(TensorSpec(info))
        return specs

    def session(self, threads=0, gpu_device=0):
        with self._session_lock:
            if self._artifact is None:
                raise errors.FailedPrecondition("the artifact is closed",
                                                kind="failed_precondition")
            if self._session is None:
                handle = ctypes.c_void_p()
                _check(self._c, self._c.flowc_session_create_on_gpu(
                    self._artifact, int(threads), int(gpu_device), ctypes.byref(handle)))
                self._session = handle
            return self._session

    def run(self, inputs, threads=0, gpu_device=0):
        """Runs on `inputs` (name -> array-like); returns the outputs in plan
        order as new arrays that the code wrote in place. The first run makes
        the session, with `threads` and, for CUDA code, on GPU `gpu_device`."""
        session = self.session(threads, gpu_device)
        arrays = []
        in_structs = (_Tensor * max(len(inputs), 1))()
        for i, (name, value) in enumerate(inputs.items()):
            spec = self._by_name.get(name)
            array = _input_array(value, spec)
            arrays.append(array)
            _fill(in_structs[i], spec, name, array)
        outputs = [np.empty(spec.shape, _numpy_dtype(spec)) for spec in self.outputs]
        out_structs = (_Tensor * max(len(outputs), 1))()
        for i, (spec, array) in enumerate(zip(self.outputs, outputs)):
            _fill(out_structs[i], spec, spec.name, array)
        _check(self._c, self._c.flowc_session_run(session, in_structs, len(inputs),
                                                  out_structs, len(outputs)))
        return outputs

    def close(self):
        if getattr(self, "_session", None):
            self._c.flowc_session_close(self._session)
            self._session = None
        if getattr(self, "_artifact", None):
            self._c.flowc_artifact_close(self._artifact)
            self._artifact = None

    __del__ = close


def _input_array(value, spec):
    """`value` as a C-contiguous, native-endian, aligned array. Array-likes
    that are not arrays take the input's dtype; an array keeps its own, so
    the C API names a mismatch instead of a silent cast."""
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.asarray(value, dtype=_numpy_dtype(spec) if spec else None)
        except (TypeError, ValueError, OverflowError) as error:
            what = f"input '{spec.name}'" if spec else "an input"
            raise errors.InvalidModel(f"{what} is not an array of numbers: {error}") from None
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    if array.ctypes.data % max(array.dtype.alignment, 1):
        array = array.copy()
    return array


def _fill(tensor, spec, name, array):
    """Points `tensor` at `array`. An array that matches `spec` takes the
    spec's prepared name, dtype and shape; any other gets its own, so that
    the C API names what differs. `array` must outlive the call."""
    if spec is not None and array.dtype == spec._np_dtype and array.shape == spec.shape:
        tensor.name, tensor.dtype, tensor.shape = spec._c_name, spec._c_dtype, spec._c_shape
        tensor.rank = len(spec.shape)
    else:
        tensor.name, tensor.dtype = name.encode(), array.dtype.name.encode()
        tensor.shape = _shape_pointer(array.shape)
        tensor.rank = array.ndim
    tensor.data = array.ctypes.data
    tensor.byte_size = array.nbytes
