"""A compiled `.fca` artifact, run in this process through the runtime's C
API."""
import hashlib
import os
import statistics
import time

from ._runtime import RuntimeArtifact


class Artifact:
    """A compiled model. `path` is the `.fca` file, `digest` its
    "sha256:<hex>/<size>". `run`, `bench` and `inspect` map it (once) and run
    it in this process; a session is made on the first run with `threads`
    library-kernel threads (0: all cores) and, for CUDA code, on the driver's
    GPU `gpu_device` (default 0). Thread-safe: runs on one artifact are
    serialized."""

    def __init__(self, path, digest=None, result=None, cache_dir=None, threads=0,
                 verify=True, gpu_device=0):
        self.path = os.fspath(path)
        self._digest = digest
        #: The daemon's answer: cache_hit, kernels_compiled, kernels_reused,
        #: seconds, job_id, explain ({} for an artifact opened with load()).
        self.result = dict(result or {})
        self._cache_dir = cache_dir
        self._threads = threads
        self._gpu_device = gpu_device
        self._runtime = RuntimeArtifact(self.path, cache_dir=cache_dir, verify=verify)

    @property
    def digest(self):
        """"sha256:<hex>/<size>" of the file: the daemon's, or hashed here."""
        if self._digest is None:
            hasher = hashlib.sha256()
            with open(self.path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    hasher.update(block)
            self._digest = f"sha256:{hasher.hexdigest()}/{os.path.getsize(self.path)}"
        return self._digest

    @property
    def inputs(self):
        return list(self._runtime.inputs)

    @property
    def outputs(self):
        return list(self._runtime.outputs)

    @property
    def metadata(self):
        return dict(self._runtime.metadata)

    def _named_inputs(self, args, kwargs):
        if len(args) > len(self._runtime.inputs):
            from .errors import InvalidModel

            raise InvalidModel(f"{len(args)} positional inputs given, the model has "
                               f"{len(self._runtime.inputs)}: "
                               f"{[s.name for s in self._runtime.inputs]}")
        named = {spec.name: value for spec, value in zip(self._runtime.inputs, args)}
        for name, value in kwargs.items():
            if name in named:
                from .errors import InvalidModel

                raise InvalidModel(f"input '{name}' is given twice")
            named[name] = value
        return named

    def run(self, *args, **inputs):
        """Runs the model once: inputs by position (plan order) or by name,
        as numpy arrays or array-likes. Returns {output name: numpy array}.
        Raises flowc.InvalidModel naming the input for a missing, unknown or
        misshapen one."""
        outputs = self._runtime.run(self._named_inputs(args, inputs), self._threads,
                                    self._gpu_device)
        return {spec.name: array for spec, array in zip(self._runtime.outputs, outputs)}

    def bench(self, *args, repeat=100, warmup=5, **inputs):
        """Latency of `run` on these inputs: `warmup` runs, then `repeat`
        timed ones. Returns milliseconds: mean, median, p90, min, max."""
        named = self._named_inputs(args, inputs)
        for _ in range(warmup):
            self._runtime.run(named, self._threads, self._gpu_device)
        times = []
        for _ in range(max(int(repeat), 1)):
            start = time.perf_counter()
            self._runtime.run(named, self._threads, self._gpu_device)
            times.append((time.perf_counter() - start) * 1e3)
        times.sort()
        return {"repeat": len(times), "mean_ms": statistics.fmean(times),
                "median_ms": statistics.median(times),
                "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))],
                "min_ms": times[0], "max_ms": times[-1]}

    def inspect(self):
        """Inputs, outputs and metadata, as plain data."""
        return {"path": self.path, "digest": self.digest,
                "size": os.path.getsize(self.path),
                "inputs": [s.to_dict() for s in self._runtime.inputs],
                "outputs": [s.to_dict() for s in self._runtime.outputs],
                "metadata": self.metadata, "result": dict(self.result)}

    def close(self):
        """Unmaps the artifact now (otherwise when it is collected)."""
        self._runtime.close()

    def __repr__(self):
        ins = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self._runtime.inputs)
        outs = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self._runtime.outputs)
        return f"<flowc.Artifact {self.path} ({ins}) -> ({outs})>"


def load(path, cache_dir=None, threads=0, verify=True, gpu_device=0):
    """Opens an existing `.fca` file. A thin artifact's weights come from
    `cache_dir` (default: the daemon's cache, as `flowc run` finds them).
    A CUDA artifact runs on the driver's GPU `gpu_device`."""
    if cache_dir is None:
        from ._daemon import Connection

        cache_dir = Connection().cache_dir
    return Artifact(path, cache_dir=cache_dir, threads=threads, verify=verify,
                    gpu_device=gpu_device)
