"""ONNX's backend node tests (shipped in the onnx wheel) run through flowc.

For every `onnx/backend/test/data/node/<test>`:

1. `flowc inspect model.onnx --json` imports and verifies the model in the
   daemon. A refusal with the "unsupported" exit status (4: status
   Unimplemented) is `unsupported` (an op, attribute, dtype or shape flowc
   does not handle yet); any other failure is an `import-error` (a bug).
2. An imported test is compiled (`flowc submit`), run on its inputs
   (`flowc run`) and each output is compared with ONNX's expected output the
   way ONNX's backend runner does (dtype, shape, then
   |actual - expected| <= atol + rtol * |expected| with rtol=1e-3, atol=1e-5):
   `pass`, `mismatch`, `compile-error` or `run-error`.

The summary `supported S / passing P / total T` counts as supported every
test not refused as unsupported (so bugs show as S - P). A mismatch whose
outputs onnxruntime (CPU) gives too, on the same model and inputs, is
`onnxruntime-agrees`: ONNX's reference and onnxruntime read the spec
differently there (Resize's align_corners with a scale that gives a
fractional length), and flowc follows onnxruntime, which the rest of the
tests compare with.

ONNX's tests give some operands as graph inputs that exporters write as
constants and flowc takes only as constants: shapes, axes, bounds, Resize's
scales and sizes (SHAPE_OPERANDS). A graph input that only feeds such
operands becomes an initializer holding the test's value, in a copy of the
model in the test's work directory.

The suite runs its own `flowcd` in the foreground on a temp cache, and
restarts it (re-running the test once) should it die.

With `--target cuda[:sm_NN]` each test is compiled for that GPU (every
kernel's PTX assembled by ptxas); on a machine without a GPU its run exits 5
and the test counts as `compiled` (not a bug, not a pass).

Usage: .venv/bin/python tests/e2e/onnx_node_suite.py [--filter REGEX]
       [--jobs N] [--target TARGET] [--json REPORT] [--keep DIR]
"""
import argparse
import collections
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("FLOWC_BIN_DIR", ROOT / "build" / "bin"))
NODE_DIR = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"

#: flowc's exit status for valid input it does not support (cli/Common.h).
EXIT_UNSUPPORTED = 4
#: ... and for a resource missing here: `flowc run` of CUDA code without a GPU.
EXIT_UNAVAILABLE = 5
#: Input dtypes `flowc run` takes.
RUN_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int64),
              np.dtype(np.int32), np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.bool_))
RTOL = 1e-3
ATOL = 1e-5
COMMAND_TIMEOUT_S = 300

PASS = "pass"
UNSUPPORTED = "unsupported"
IMPORT_ERROR = "import-error"
COMPILE_ERROR = "compile-error"
RUN_ERROR = "run-error"
MISMATCH = "mismatch"
#: Compiled for a GPU this machine does not have: nothing ran.
COMPILED = "compiled"
#: Differs from ONNX's expected output as onnxruntime does: onnxruntime's
#: output on the same model and inputs is flowc's (where ONNX's reference
#: and onnxruntime read the spec differently). Not a pass, not a bug.
ONNXRUNTIME_AGREES = "onnxruntime-agrees"
CATEGORIES = (PASS, COMPILED, UNSUPPORTED, IMPORT_ERROR, COMPILE_ERROR, RUN_ERROR, MISMATCH,
              ONNXRUNTIME_AGREES)
#: Categories that are flowc bugs (a supported test that does not pass).
BUGS = (IMPORT_ERROR, COMPILE_ERROR, RUN_ERROR, MISMATCH)


@dataclasses.dataclass
class Result:
    """The outcome of one node test."""
    name: str
    category: str
    reason: str = ""
    ops: list = dataclasses.field(default_factory=list)
    #: Exit status of the failing flowc command (0 if none failed).
    code: int = 0
    #: The op a failure is attributed to (see failing_op); "" for a pass.
    op: str = ""
    seconds: float = 0.0
    max_abs_error: float = None
    max_rel_error: float = None


# Test data -----------------------------------------------------------------

def node_tests(pattern: str = None) -> list:
    """Test directories under NODE_DIR whose name matches `pattern` (re.search)."""
    regex = re.compile(pattern) if pattern else None
    return sorted(d for d in NODE_DIR.iterdir()
                  if (d / "model.onnx").is_file() and (not regex or regex.search(d.name)))


def load_tensor(path: pathlib.Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def data_files(test_dir: pathlib.Path, kind: str) -> list:
    """input_*.pb or output_*.pb of the first data set, in numeric order."""
    files = (test_dir / "test_data_set_0").glob(f"{kind}_*.pb")
    return sorted(files, key=lambda p: int(p.stem.split("_")[1]))


def model_ops(model: onnx.ModelProto) -> list:
    """Op types of the top-level graph, in order of first use."""
    return list(dict.fromkeys(n.op_type for n in model.graph.node))


def graph_input_names(model: onnx.ModelProto) -> list:
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


# Operands that exporters write as constants and flowc takes only as
# constants (shapes, axes, bounds, scales), by op: input positions.
SHAPE_OPERANDS = {
    "Resize": {1, 2, 3}, "Reshape": {1}, "Expand": {1}, "Slice": {1, 2, 3, 4},
    "Squeeze": {1}, "Unsqueeze": {1}, "Pad": {1, 2, 3}, "Split": {1}, "Clip": {1, 2},
    "ReduceMean": {1}, "ReduceSum": {1}, "ReduceMax": {1}, "ReduceMin": {1},
    "ReduceProd": {1},
}


def shape_operand_inputs(model: onnx.ModelProto) -> set:
    """Graph inputs that only ever feed SHAPE_OPERANDS positions."""
    uses = collections.defaultdict(list)
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            uses[name].append(position in SHAPE_OPERANDS.get(node.op_type, ()))
    return {name for name in graph_input_names(model)
            if uses.get(name) and all(uses[name])}


def with_constant_shape_operands(test_dir: pathlib.Path, model: onnx.ModelProto,
                                 work: pathlib.Path):
    """The test's model, or a copy in `work` in which the inputs that only
    feed shape operands are initializers holding the test's values (ONNX's
    tests give them as graph inputs; exports give them as constants, and so
    flowc takes them): (model path, model)."""
    constant = shape_operand_inputs(model)
    if not constant:
        return test_dir / "model.onnx", model
    values = load_inputs(test_dir, model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.initializer.extend(numpy_helper.from_array(values[name], name)
                                  for name in constant)
    kept = [i for i in copy.graph.input if i.name not in constant]
    del copy.graph.input[:]
    copy.graph.input.extend(kept)
    path = work / "model.onnx"
    onnx.save(copy, str(path))
    return path, copy


def load_inputs(test_dir: pathlib.Path, model: onnx.ModelProto) -> dict:
    """name -> array; input_i.pb feeds the i-th non-initializer graph input."""
    names = graph_input_names(model)
    return {name: load_tensor(path)
            for name, path in zip(names, data_files(test_dir, "input"))}


def expected_outputs(test_dir: pathlib.Path, model: onnx.ModelProto) -> dict:
    """name -> array; output_i.pb is the i-th graph output."""
    names = [o.name for o in model.graph.output]
    return {name: load_tensor(path)
            for name, path in zip(names, data_files(test_dir, "output"))}


# Comparison ----------------------------------------------------------------

def compare(actual: np.ndarray, expected: np.ndarray):
    """None when close, else (reason, max abs error, max rel error)."""
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}", None, None
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)}, expected {list(expected.shape)}", None, None
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    close = np.isclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True)
    if close.all():
        return None
    bad = ~close
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.abs(a - e)[bad]
        rel = diff / np.abs(e[bad])
    finite = np.isfinite(diff)
    max_abs = float(diff[finite].max()) if finite.any() else float("inf")
    rel_finite = rel[np.isfinite(rel)]
    max_rel = float(rel_finite.max()) if rel_finite.size else float("inf")
    reason = (f"{int(bad.sum())}/{bad.size} elements differ, max abs err {max_abs:.3g}, "
              f"max rel err {max_rel:.3g}")
    nonfinite = int((~finite).sum())
    if nonfinite:
        reason += f", {nonfinite} NaN/inf where not expected"
    return reason, max_abs, max_rel


# Daemon --------------------------------------------------------------------

class Daemon:
    """A flowcd on a temp cache and socket, run in the foreground so that a
    crash is seen (and survived) rather than hidden by autostart."""

    def __init__(self, tmp: pathlib.Path, workers: int = 2):
        self.tmp = tmp
        self.cache_dir = tmp / "cache"
        self.socket = tmp / "flowcd.sock"
        self.log_path = tmp / "flowcd.log"
        self.workers = workers
        self.process = None
        self.generation = 0
        self.restarts = 0
        self.lock = threading.Lock()
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("FLOWC_CACHE_DIR", "FLOWC_SOCKET")}
        # A dead daemon must fail requests, not be replaced behind our back
        # by one with default options and another log.
        self.env["FLOWC_AUTOSTART"] = "0"

    def cli(self, *args) -> subprocess.CompletedProcess:
        cmd = [str(BIN / "flowc"), "--cache-dir", str(self.cache_dir), "--socket",
               str(self.socket), *map(str, args)]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, env=self.env,
                                  timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(
                cmd, -1, "", f"timed out after {COMMAND_TIMEOUT_S} s")

    def start(self):
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(BIN / "flowcd"), "--cache-dir", str(self.cache_dir), "--socket",
                 str(self.socket), "--workers", str(self.workers)],
                stdout=subprocess.DEVNULL, stderr=log, env=self.env)
        self.generation += 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"flowcd exited with {self.process.returncode}; "
                                   f"see {self.log_path}")
            if '"running":true' in self.cli("status", "--json").stdout:
                return
            time.sleep(0.05)
        raise RuntimeError(f"flowcd did not answer; see {self.log_path}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart_if_dead(self, generation: int) -> bool:
        """Restarts the daemon if the one of `generation` died; True if it had."""
        with self.lock:
            if self.generation != generation:
                return True
            if self.alive():
                return False
            self.restarts += 1
            self.start()
            return True

    def stop(self):
        if not self.alive():
            return
        self.cli("daemon", "stop")
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            self.process.wait(timeout=30)


# One test ------------------------------------------------------------------

def error_message(completed: subprocess.CompletedProcess, model_path: str) -> str:
    """The `flowc: error:` line without the model's path; else the stderr tail."""
    lines = completed.stderr.strip().splitlines()
    errors = [l[len("flowc: error: "):] for l in lines if l.startswith("flowc: error: ")]
    message = errors[-1] if errors else (lines[-1] if lines else "")
    if completed.returncode < 0 and not errors:
        message = f"killed by signal {-completed.returncode}; {message}"
    elif not errors:
        message = f"exit code {completed.returncode}; {message}"
    return message.replace(model_path + ": ", "").replace(model_path, "model.onnx")


NODE_OP = re.compile(r"^node '[^']*' \(([\w.]+)\)")
UNSUPPORTED_OP = re.compile(r"unsupported op '([\w.]+)'")
INPUT_NAME = re.compile(r"^input '([^']*)'")


def failing_op(message: str, model: onnx.ModelProto) -> str:
    """The op an error message names (the node's op, an unsupported op, or
    the first consumer of the input it names), else the model's first op
    other than Constant."""
    match = NODE_OP.search(message) or UNSUPPORTED_OP.search(message)
    if match:
        return match[1]
    nodes = model.graph.node
    match = INPUT_NAME.search(message)
    if match:
        consumers = [n.op_type for n in nodes if match[1] in n.input]
        if consumers:
            return consumers[0]
    ops = [n.op_type for n in nodes if n.op_type != "Constant"] or model_ops(model)
    return ops[0] if ops else "?"


class Runner:
    """Runs node tests against one daemon; thread-safe."""

    def __init__(self, daemon: Daemon, work: pathlib.Path, keep: bool = False,
                 target: str = "cpu"):
        self.daemon = daemon
        self.work = work
        self.keep = keep
        self.target = target

    def run(self, test_dir: pathlib.Path) -> Result:
        start = time.monotonic()
        model = onnx.load(str(test_dir / "model.onnx"), load_external_data=False)
        ops = model_ops(model)
        result, generation = self._attempt(test_dir, model)
        if result.category in BUGS and self.daemon.restart_if_dead(generation):
            # The request died with the daemon: run it again on a new one.
            result, generation = self._attempt(test_dir, model)
            if result.category in BUGS and self.daemon.restart_if_dead(generation):
                result.reason = "the daemon crashed (twice): " + result.reason
        result.ops = ops
        result.op = failing_op(result.reason, model) if result.category != PASS else ""
        result.seconds = round(time.monotonic() - start, 3)
        return result

    def _attempt(self, test_dir: pathlib.Path, model: onnx.ModelProto):
        """(result, the daemon generation it ran against)."""
        generation = self.daemon.generation
        work = self.work / test_dir.name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        result = self._check(test_dir, model, work)
        if result.category in (PASS, COMPILED, UNSUPPORTED) and not self.keep:
            shutil.rmtree(work, ignore_errors=True)
        return result, generation

    def _check(self, test_dir: pathlib.Path, model: onnx.ModelProto,
               work: pathlib.Path) -> Result:
        name = test_dir.name
        original = model
        path, model = with_constant_shape_operands(test_dir, model, work)
        model_path = os.path.normpath(os.path.abspath(path))

        inspected = self.daemon.cli("inspect", model_path, "--json")
        if inspected.returncode != 0:
            category = UNSUPPORTED if inspected.returncode == EXIT_UNSUPPORTED else IMPORT_ERROR
            return Result(name, category, error_message(inspected, model_path),
                          code=inspected.returncode)
        info = json.loads(inspected.stdout)

        inputs = load_inputs(test_dir, original)
        for spec in info["inputs"]:
            value = inputs.get(spec["name"])
            if value is None:
                return Result(name, IMPORT_ERROR,
                              f"flowc input '{spec['name']}' is not a graph input of the test")
            if value.dtype not in RUN_DTYPES:
                return Result(name, IMPORT_ERROR,
                              f"imported although input '{spec['name']}' is {value.dtype} "
                              f"(flowc run takes {', '.join(map(str, RUN_DTYPES))})")

        artifact = work / "model.fca"
        submitted = self.daemon.cli("submit", model_path, "-o", artifact, "--json",
                                    "--target", self.target)
        if submitted.returncode != 0:
            return Result(name, COMPILE_ERROR, error_message(submitted, model_path),
                          code=submitted.returncode)

        args = []
        for i, spec in enumerate(info["inputs"]):
            path = work / f"input_{i}.npy"
            np.save(path, inputs[spec["name"]])
            args += ["--input", f"{spec['name']}={path}"]
        ran = self.daemon.cli("run", artifact, *args, "--output-dir", work / "out", "--json")
        if ran.returncode == EXIT_UNAVAILABLE and self.target.startswith("cuda"):
            return Result(name, COMPILED, error_message(ran, model_path))
        if ran.returncode != 0:
            return Result(name, RUN_ERROR, error_message(ran, model_path))
        actual = {o["name"]: np.load(o["file"]) for o in json.loads(ran.stdout)["outputs"]}
        result = self._compare(name, actual, expected_outputs(test_dir, model))
        if result.category == MISMATCH and onnxruntime_agrees(model_path, inputs, info, actual):
            result.category = ONNXRUNTIME_AGREES
        return result

    @staticmethod
    def _compare(name: str, actual: dict, expected: dict) -> Result:
        if actual.keys() != expected.keys():
            return Result(name, MISMATCH, f"outputs {sorted(actual)}, expected {sorted(expected)}")
        failures, max_abs, max_rel = [], None, None
        for output, value in expected.items():
            outcome = compare(actual[output], value)
            if outcome is None:
                continue
            reason, abs_err, rel_err = outcome
            failures.append(f"output '{output}': {reason}")
            if abs_err is not None:
                max_abs = max(abs_err, max_abs or 0.0)
                max_rel = max(rel_err, max_rel or 0.0)
        if not failures:
            return Result(name, PASS)
        return Result(name, MISMATCH, "; ".join(failures),
                      max_abs_error=max_abs, max_rel_error=max_rel)


def onnxruntime_agrees(model_path: str, inputs: dict, info: dict, actual: dict) -> bool:
    """Whether onnxruntime (CPU) gives flowc's outputs on the model flowc ran."""
    try:
        import onnxruntime
        session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        feeds = {spec["name"]: inputs[spec["name"]] for spec in info["inputs"]}
        theirs = dict(zip(names, session.run(None, feeds)))
    except Exception:  # onnxruntime refuses it, or is not installed: no second opinion
        return False
    return theirs.keys() == actual.keys() and all(
        compare(actual[name], theirs[name]) is None for name in theirs)


# The suite -----------------------------------------------------------------

@dataclasses.dataclass
class Report:
    results: list = dataclasses.field(repr=False)
    wall_seconds: float
    daemon_restarts: int = 0

    def count(self, *categories) -> int:
        return sum(r.category in categories for r in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def supported(self) -> int:
        """Tests flowc does not refuse as unsupported (bugs included)."""
        return self.total - self.count(UNSUPPORTED)

    @property
    def passing(self) -> int:
        return self.count(PASS)

    def by_category(self, category: str) -> list:
        return [r for r in self.results if r.category == category]

    def summary_line(self) -> str:
        return (f"onnx node tests: supported {self.supported} / passing {self.passing} "
                f"/ total {self.total}")

    def to_json(self) -> dict:
        return {
            "summary": {"supported": self.supported, "passing": self.passing,
                        "total": self.total, "wall_seconds": round(self.wall_seconds, 1),
                        "daemon_restarts": self.daemon_restarts,
                        "counts": {c: self.count(c) for c in CATEGORIES}},
            "unsupported_ops": dict(unsupported_ops(self.results)),
            "tests": [dataclasses.asdict(r) for r in self.results],
        }


def run_suite(pattern: str = None, jobs: int = 3, workers: int = 2, keep: str = None,
              progress=None, target: str = "cpu") -> Report:
    """Runs the node tests matching `pattern` on a fresh daemon."""
    tests = node_tests(pattern)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flowc-onnx-node-") as tmp:
        daemon = Daemon(pathlib.Path(tmp), workers=workers)
        work = pathlib.Path(keep) if keep else pathlib.Path(tmp) / "work"
        runner = Runner(daemon, work, keep=bool(keep), target=target)
        daemon.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
                results = []
                for result in pool.map(runner.run, tests):
                    results.append(result)
                    if progress:
                        progress(len(results), len(tests))
        finally:
            daemon.stop()
    return Report(sorted(results, key=lambda r: r.name), time.monotonic() - start,
                  daemon.restarts)


# Reporting -----------------------------------------------------------------

def unsupported_ops(results: list) -> collections.Counter:
    """Op type -> number of tests refused with "unsupported op 'X'"."""
    return collections.Counter(
        m[1] for r in results if r.category == UNSUPPORTED
        for m in [UNSUPPORTED_OP.search(r.reason)] if m)


def normalized_reason(reason: str) -> str:
    """A reason with node, input and output names elided, for grouping."""
    reason = NODE_OP.sub(lambda m: f"({m[1]})", reason)
    reason = re.sub(r"(input|output|tensor|value|initializer) '[^']*'", r"\1 '…'", reason)
    return reason


def grouped(results: list) -> list:
    """[(op, normalized reason, [names])], largest groups first."""
    groups = collections.defaultdict(list)
    for r in results:
        groups[(r.op, normalized_reason(r.reason))].append(r.name)
    return sorted(((op, reason, names) for (op, reason), names in groups.items()),
                  key=lambda g: (-len(g[2]), g[0], g[1]))


INPUT_DTYPE = re.compile(r"has dtype (\S+); only float32 inputs are supported")


def format_unsupported(unsupported: list, top: int) -> list:
    """Unsupported tests in three groups: ops refused outright (top `top`),
    non-float32 graph inputs (by dtype), other features (by op and reason)."""
    if not unsupported:
        return []
    first = unsupported_ops(unsupported)
    containing = collections.Counter(op for r in unsupported for op in set(r.ops)
                                     if op in first)
    lines = [f"unsupported op types, top {top} of {len(first)} by unsupported tests "
             f"containing them (and refused at them first; {sum(first.values())} tests):"]
    lines += [f"  {op}: {n} ({first[op]})" for op, n in containing.most_common(top)]
    dtypes = collections.Counter(m[1] for r in unsupported
                                 for m in [INPUT_DTYPE.search(r.reason)] if m)
    lines.append(f"unsupported non-float32 graph inputs ({sum(dtypes.values())} tests): "
                 + ", ".join(f"{d} {n}" for d, n in dtypes.most_common()))
    others = [r for r in unsupported
              if not UNSUPPORTED_OP.search(r.reason) and not INPUT_DTYPE.search(r.reason)]
    lines.append(f"unsupported features ({len(others)} tests):")
    for op, reason, names in grouped(others):
        lines.append(f"  {op} ({len(names)}): {reason}")
    return lines


def format_report(report: Report, top: int = 30) -> list:
    """Human-readable lines: counts, failures, unsupported groups, summary."""
    lines = [f"{c}: {report.count(c)}" for c in CATEGORIES]
    for category in BUGS:
        for r in report.by_category(category):
            lines.append(f"FAIL {category} {r.name} [{r.op}]: {r.reason}")
    for r in report.by_category(ONNXRUNTIME_AGREES):
        lines.append(f"{ONNXRUNTIME_AGREES} {r.name} [{r.op}]: {r.reason}")
    for category in BUGS:
        for op, reason, names in grouped(report.by_category(category)):
            lines.append(f"{category}: {op} ({len(names)} tests: {', '.join(names)}): "
                         f"{reason}")
    lines += format_unsupported(report.by_category(UNSUPPORTED), top)
    lines.append(f"wall time {report.wall_seconds:.1f} s"
                 + (f", daemon restarted {report.daemon_restarts}x"
                    if report.daemon_restarts else ""))
    lines.append(report.summary_line())
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--filter", help="only tests whose name matches this regex")
    parser.add_argument("--jobs", type=int, default=3, help="tests run concurrently")
    parser.add_argument("--workers", type=int, default=2, help="flowcd --workers")
    parser.add_argument("--target", default="cpu", help="flowc submit --target")
    parser.add_argument("--json", help="write the full report to this file")
    parser.add_argument("--keep", help="keep failing tests' files under this directory")
    args = parser.parse_args(argv)

    def progress(done, total):
        if done % 200 == 0 or done == total:
            print(f"[{done}/{total}]", file=sys.stderr, flush=True)

    report = run_suite(args.filter, args.jobs, args.workers, args.keep, progress, args.target)
    print("\n".join(format_report(report)))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report.to_json(), indent=1) + "\n")
    return 0 if report.count(*BUGS) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
