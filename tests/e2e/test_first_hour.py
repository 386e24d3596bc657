"""A user's first hour: --version, usage errors, the daemon's settings
(flags > environment > config file > defaults), auto-start and the idle
timeout, global options after the subcommand, socket paths that are too
long, `flowc run` without --output-dir, -o errors, cache statistics, the
submit report's kernel and transfer figures, fast cache hits (hard links)
and --precision bf16 on CPUs without it."""
import json
import os
import pathlib
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import make_models
from conftest import BIN, ROOT, assert_close, onnxruntime_outputs

MiB = 1 << 20
USAGE, BAD, UNSUPPORTED = 2, 3, 4


# --- helpers -----------------------------------------------------------------

def environment(**changes):
    """This process's environment without any FLOWC_* variable (so a
    caller's settings cannot leak in), plus `changes`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWC_")}
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def cli(*args, env=None, cwd=None, timeout=300):
    return subprocess.run([str(BIN / "flowc"), *map(str, args)], capture_output=True,
                          text=True, env=env or environment(), cwd=cwd, timeout=timeout)


def daemon_cli(*args, env=None, timeout=60):
    return subprocess.run([str(BIN / "flowcd"), *map(str, args)], capture_output=True,
                          text=True, env=env or environment(), timeout=timeout)


def stop_daemon(socket):
    """Stops whatever daemon listens on `socket`; never starts one."""
    cli("--socket", socket, "daemon", "stop", env=environment(FLOWC_AUTOSTART="0"))


def stats_of(cache_dir, socket):
    result = cli("--cache-dir", cache_dir, "--socket", socket, "cache", "stats", "--json",
                 env=environment(FLOWC_AUTOSTART="0"))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


class Daemon:
    """`flowcd --cache-dir D --socket S ARGS` in the foreground (Popen), its
    stderr in a file; waits until it answers and always terminates it."""

    def __init__(self, cache_dir, socket, *args, env=None):
        self.cache_dir, self.socket = pathlib.Path(cache_dir), pathlib.Path(socket)
        self.args, self.env = [str(a) for a in args], env or environment()
        self.log = self.socket.with_name(self.socket.name + ".stderr")

    def __enter__(self):
        self.log_file = open(self.log, "w")
        self.process = subprocess.Popen(
            [str(BIN / "flowcd"), "--cache-dir", str(self.cache_dir), "--socket",
             str(self.socket), *self.args], stdout=self.log_file, stderr=self.log_file,
            env=self.env)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise AssertionError(f"flowcd exited with {self.process.returncode}: "
                                         f"{self.log.read_text()}")
                # Never auto-start: a second daemon would race this one.
                result = cli("--socket", self.socket, "status", "--json",
                             env=environment(FLOWC_AUTOSTART="0"))
                if result.returncode == 0 and json.loads(result.stdout).get("running"):
                    return self
                time.sleep(0.1)
            raise AssertionError(f"flowcd did not answer: {self.log.read_text()}")
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()

    def stderr(self):
        return self.log.read_text()

    def max_bytes(self):
        return stats_of(self.cache_dir, self.socket)["max_bytes"]


def cpu_isa() -> str:
    """The oneDNN CPU ISA that `flowc --version` reports (avx2, avx512_core, ...)."""
    result = cli("--version")
    match = re.search(r"CPU ISA (\S+)", result.stdout)
    assert result.returncode == 0 and match, result.stdout + result.stderr
    return match.group(1)


def bf16_supported() -> bool:
    """oneDNN 2.6 has bf16 kernels from AVX-512 up (avx512_core, _vnni,
    _bf16, _amx); below (avx2, avx2_vnni, avx, sse41) flowc refuses bf16."""
    return cpu_isa().startswith("avx512")


def assert_bf16_refused(result):
    """The clear refusal of --precision bf16 on a CPU without AVX-512."""
    assert result.returncode == UNSUPPORTED, result.stderr
    assert result.stderr.startswith("flowc: error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "--precision bf16 needs a CPU with AVX-512" in result.stderr
    assert "use --precision fp32" in result.stderr


def one_line(stderr):
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def models(tmp_path):
    """examples/make_models.py DIR: cnn.onnx (a ~65 KB artifact),
    mlp.onnx and their inputs."""
    out = tmp_path / "models"
    subprocess.run([str(ROOT / ".venv" / "bin" / "python"),
                    str(ROOT / "examples" / "make_models.py"), str(out)],
                   check=True, capture_output=True, timeout=300)
    return out


def big_model(path: pathlib.Path):
    """MatMul with a 512x512 weight, then Relu: a ~1 MiB artifact, stored as
    a file in the cache (> 64 KiB), not inline. Returns (path, input, output)."""
    rng = np.random.default_rng(3)
    weight = (rng.standard_normal((512, 512)) * 0.05).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", make_models.OPSET)],
                              ir_version=make_models.IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    x = rng.standard_normal((1, 512)).astype(np.float32)
    return path, x, np.maximum(x @ weight, 0)


def submit_json(flowc, model, out, *options):
    result = flowc.run("submit", model, "-o", out, "--json", *options, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def cas_file(cache_dir, digest):
    """sha256:<hex>/<size> -> CACHE_DIR/cas/<hex[:2]>/<hex[2:]>."""
    match = re.fullmatch(r"sha256:([0-9a-f]{64})/(\d+)", digest)
    assert match, digest
    return cache_dir / "cas" / match.group(1)[:2] / match.group(1)[2:]


# --- 1. versions ---------------------------------------------------------------

@pytest.mark.parametrize("program", ["flowc", "flowcd"])
def test_version_names_the_build_and_its_libraries(program):
    # --version exits 0 and prints program version, build id and libraries.
    result = subprocess.run([str(BIN / program), "--version"], capture_output=True, text=True,
                            env=environment(), timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{program} 0.10.0"), result.stdout
    assert any(line.startswith("build id: ") for line in lines), result.stdout
    assert any(line.startswith("MLIR/LLVM: 22.") for line in lines), result.stdout
    assert any(line.startswith("oneDNN: ") and "CPU ISA " in line for line in lines), \
        result.stdout
    assert any(line.startswith("CUDA:") for line in lines), result.stdout
    # It talks to no daemon and starts none.
    assert result.stderr == ""


# --- 2. usage errors ----------------------------------------------------------

def test_usage_errors_exit_2_in_both_binaries(tmp_path):
    cache_dir, socket = tmp_path / "cache", tmp_path / "flowcd.sock"
    where = ["--cache-dir", cache_dir, "--socket", socket]
    flowcd_cases = [
        # An unknown flag.
        (["--bogus"], {}, ["--bogus"]),
        # A size that is no size, named with the flag and the value.
        (["--max-size", "garbage"], {}, ["--max-size", "'garbage'"]),
        # Below the 1 MiB minimum.
        (["--max-size", "10"], {}, ["--max-size", "'10'", "1 MiB minimum"]),
        # The same check on the environment names the variable.
        ([], {"FLOWC_CACHE_MAX_SIZE": "abc"}, ["FLOWC_CACHE_MAX_SIZE", "'abc'"]),
        # A negative duration.
        (["--idle-timeout", "-5"], {}, ["--idle-timeout", "'-5'"]),
    ]
    try:
        for args, env, messages in flowcd_cases:
            # flowcd refuses at once: it never gets as far as listening.
            result = daemon_cli(*where, *args, env=environment(**env), timeout=30)
            assert result.returncode == USAGE, (args, env, result.stderr)
            for message in messages:
                assert message in result.stderr, (args, env, result.stderr)
            assert not socket.exists(), (args, env)
        flowc_cases = [
            # submit without a model.
            (["submit"], ["model is required"]),
            # gc with a size that is no size.
            (["cache", "gc", "--max-size", "garbage"], ["--max-size", "invalid size 'garbage'"]),
        ]
        for args, messages in flowc_cases:
            # Default auto-start: a usage error still must not start a daemon.
            result = cli(*where, *args, timeout=60)
            assert result.returncode == USAGE, (args, result.stderr)
            for message in messages:
                assert message in result.stderr, (args, result.stderr)
            assert not (cache_dir / "flowcd.log").exists(), \
                f"{args}: a usage error auto-started a daemon"
    finally:
        stop_daemon(socket)


# --- 3. cache size cap: flags > environment > config file > default ----------

def test_cache_size_cap_flags_over_env_over_config_over_default(tmp_path):
    socket = tmp_path / "flowcd.sock"
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    # No flag, variable or file: the 20 GiB default.
    with Daemon(cache_dir, socket) as daemon:
        assert daemon.max_bytes() == 20 << 30
    # CACHE_DIR/flowcd.conf is read by default.
    (cache_dir / "flowcd.conf").write_text("# the size cap\nmax-size = 300M\n")
    with Daemon(cache_dir, socket) as daemon:
        assert daemon.max_bytes() == 300 * MiB
    # The environment beats the file.
    env = environment(FLOWC_CACHE_MAX_SIZE="200M")
    with Daemon(cache_dir, socket, env=env) as daemon:
        assert daemon.max_bytes() == 200 * MiB
    # The flag beats both.
    with Daemon(cache_dir, socket, "--max-size", "100M", env=env) as daemon:
        assert daemon.max_bytes() == 100 * MiB
    # A file elsewhere, by --config or FLOWC_CONFIG, replaces the default file.
    other = tmp_path / "elsewhere.conf"
    other.write_text("max-size = 400M\n")
    with Daemon(cache_dir, socket, "--config", other) as daemon:
        assert daemon.max_bytes() == 400 * MiB
    with Daemon(cache_dir, socket, env=environment(FLOWC_CONFIG=str(other))) as daemon:
        assert daemon.max_bytes() == 400 * MiB

    def refused(*args, env=None):
        result = daemon_cli("--cache-dir", cache_dir, "--socket", socket, *args, env=env,
                            timeout=30)
        assert result.returncode == USAGE, result.stderr
        assert not socket.exists()
        return result.stderr

    # An unknown key (underscore, not dash) names file:line and the key.
    bad_key = tmp_path / "bad_key.conf"
    bad_key.write_text("# comment\nmax_size = 1G\n")
    stderr = refused("--config", bad_key)
    assert f"{bad_key}:2" in stderr and "max_size" in stderr
    # The same in the default file.
    (cache_dir / "flowcd.conf").write_text("max_size = 1G\n")
    stderr = refused()
    assert f"{cache_dir / 'flowcd.conf'}:1" in stderr and "max_size" in stderr
    # A line without '='.
    no_equals = tmp_path / "no_equals.conf"
    no_equals.write_text("max-size 1G\n")
    stderr = refused("--config", no_equals)
    assert f"{no_equals}:1" in stderr and "max-size 1G" in stderr
    # A named file that does not exist, by flag and by environment.
    missing = tmp_path / "missing.conf"
    assert str(missing) in refused("--config", missing)
    assert str(missing) in refused(env=environment(FLOWC_CONFIG=str(missing)))


# --- 4. unknown FLOWC_* variables -----------------------------------------------

def test_unknown_flowc_variables_are_warned_about_and_ignored(tmp_path):
    cache_dir, socket = tmp_path / "cache", tmp_path / "flowcd.sock"
    warning = "ignoring unknown environment variable FLOWC_CACHE_DIRS"
    env = environment(FLOWC_CACHE_DIRS="x")
    with Daemon(cache_dir, socket, env=env) as daemon:
        # flowcd logs the warning on its stderr and serves anyway.
        assert f"warning flowcd {warning}" in daemon.stderr()
        # flowc: one warning line on stderr, then the command works.
        result = cli("--cache-dir", cache_dir, "--socket", socket, "status", env=env)
        assert result.returncode == 0, result.stderr
        line = one_line(result.stderr)
        assert line.startswith(f"flowc: warning: {warning}"), line
        assert "running" in result.stdout and str(socket) in result.stdout
        # With --json, stdout stays pure JSON.
        result = cli("--cache-dir", cache_dir, "--socket", socket, "status", "--json", env=env)
        assert result.returncode == 0 and json.loads(result.stdout)["running"]
        assert one_line(result.stderr).startswith(f"flowc: warning: {warning}")
    # An auto-started daemon logs it in CACHE_DIR/flowcd.log.
    auto_dir = tmp_path / "auto"
    try:
        result = cli("--cache-dir", auto_dir, "--socket", socket, "daemon", "start", env=env)
        assert result.returncode == 0, result.stderr
        assert warning in (auto_dir / "flowcd.log").read_text()
    finally:
        stop_daemon(socket)


# --- 5. global options after the subcommand -------------------------------------

def test_global_options_work_after_the_subcommand(tmp_path, models):
    cache_dir, socket = tmp_path / "cache", tmp_path / "flowcd.sock"
    try:
        # status with the options after it: no daemon yet, on this socket.
        result = cli("status", "--socket", socket, "--cache-dir", cache_dir, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"running": False, "socket": str(socket)}
        # submit with them after the model: auto-starts on this cache and socket.
        out = tmp_path / "cnn.fca"
        result = cli("submit", models / "cnn.onnx", "--cache-dir", cache_dir, "--socket",
                     socket, "-o", out, "--json")
        assert result.returncode == 0, result.stderr
        first = json.loads(result.stdout)
        assert first["cache"] == "miss" and out.is_file()
        assert (cache_dir / "flowcd.log").is_file()
        result = cli("status", "--socket", socket, "--cache-dir", cache_dir, "--json")
        status = json.loads(result.stdout)
        assert status["running"] and status["socket"] == str(socket)
        assert status["cache_dir"] == str(cache_dir)
        # The same options before the subcommand reach the same daemon: a hit.
        result = cli("--cache-dir", cache_dir, "--socket", socket, "submit",
                     models / "cnn.onnx", "-o", tmp_path / "again.fca", "--json")
        assert result.returncode == 0, result.stderr
        again = json.loads(result.stdout)
        assert again["cache"] == "hit"
        assert again["artifact_digest"] == first["artifact_digest"]
    finally:
        stop_daemon(socket)


# --- 6. socket paths beyond the 107-byte limit ----------------------------------

def test_a_socket_path_over_107_bytes_fails_at_once_with_one_line(tmp_path, models):
    long_socket = str(tmp_path) + "/" + "s" * (120 - len(str(tmp_path)) - 1)
    assert len(long_socket) == 120
    cache_dir = tmp_path / "cache"
    # Default auto-start: no 30 s wait, exit 3, one line naming the limit.
    start = time.monotonic()
    result = cli("--cache-dir", cache_dir, "--socket", long_socket, "submit",
                 models / "cnn.onnx", "-o", tmp_path / "cnn.fca", timeout=60)
    assert time.monotonic() - start < 10
    assert result.returncode == BAD, result.stderr
    line = one_line(result.stderr)
    assert line.startswith("flowc: error: socket path"), line
    assert "107" in line and long_socket in line
    # No gRPC log lines (E1201 12:00:00.000 ...-style glog prefixes).
    assert "grpc" not in result.stderr.lower()
    assert not re.search(r"^[EWIF]\d{4} ", result.stderr, re.M)
    # Nothing was started, nothing written.
    assert not (cache_dir / "flowcd.log").exists()
    assert not (tmp_path / "cnn.fca").exists()
    # flowcd refuses the same path, naming the limit.
    result = daemon_cli("--socket", long_socket, "--cache-dir", cache_dir, timeout=30)
    assert result.returncode in (1, 2), result.stderr
    assert "socket path" in result.stderr and "107" in result.stderr
    # 107 bytes is still fine.
    fits = str(tmp_path) + "/" + "f" * (107 - len(str(tmp_path)) - 1)
    assert len(fits) == 107
    with Daemon(tmp_path / "fits", fits):
        pass


# --- 7. auto-start ------------------------------------------------------------

def test_autostart_logs_to_the_cache_dir_with_a_1h_idle_timeout(tmp_path, models):
    cache_dir, socket = tmp_path / "cache", tmp_path / "flowcd.sock"
    where = ["--cache-dir", cache_dir, "--socket", socket]
    try:
        # FLOWC_AUTOSTART unset: submit starts a daemon.
        result = cli(*where, "submit", models / "cnn.onnx", "-o", tmp_path / "cnn.fca")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("flowc: cache miss"), result.stdout
        # Not a terminal: no "started flowcd" chatter.
        assert "started flowcd" not in result.stderr + result.stdout
        # Its log is CACHE_DIR/flowcd.log, with the start-up line and 1h idle timeout.
        log = (cache_dir / "flowcd.log").read_text()
        listening = [line for line in log.splitlines() if "listening" in line]
        assert len(listening) == 1, log
        assert f"socket={socket}" in listening[0] and "idle_timeout_s=3600" in listening[0]
        result = cli(*where, "daemon", "stop")
        assert result.returncode == 0 and "stopped" in result.stdout
        # `daemon start` in a pipe: the plain answer only.
        result = cli(*where, "daemon", "start")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("flowcd: running pid ")
        assert "started flowcd" not in result.stderr + result.stdout
        cli(*where, "daemon", "stop")
        # On a terminal (script(1) gives it one) the start is said once.
        if shutil.which("script"):
            command = " ".join(shlex.quote(str(a)) for a in
                               [BIN / "flowc", *where, "daemon", "start"])
            result = subprocess.run(["script", "-qec", command, "/dev/null"],
                                    capture_output=True, text=True, env=environment(),
                                    timeout=120)
            assert result.returncode == 0, result.stdout + result.stderr
            said = [line for line in result.stdout.splitlines() if "started flowcd" in line]
            assert len(said) == 1, result.stdout
            assert said[0].startswith("flowc: started flowcd (pid ")
            assert str(cache_dir / "flowcd.log") in said[0] and "1h idle" in said[0]
    finally:
        stop_daemon(socket)


# --- 8. idle timeout ------------------------------------------------------------

def test_idle_timeout_stops_an_unused_daemon(tmp_path):
    cache_dir, socket = tmp_path / "cache", tmp_path / "flowcd.sock"
    process = subprocess.Popen(
        [str(BIN / "flowcd"), "--cache-dir", str(cache_dir), "--socket", str(socket),
         "--idle-timeout", "2s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environment())
    try:
        # Nothing talks to it: it exits by itself, cleanly (generous bound).
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "idle_timeout_s=2" in stderr
    assert "shutting down after 2 s idle" in stderr
    assert "flowcd stopped" in stderr
    # Nobody answers on its socket any more.
    result = cli("--socket", socket, "status", "--json", env=environment(FLOWC_AUTOSTART="0"))
    assert json.loads(result.stdout)["running"] is False


# --- 9. flowc run without --output-dir -------------------------------------------

def test_run_prints_outputs_and_writes_files_only_with_output_dir(flowc, tmp_path, models):
    artifact = tmp_path / "mlp.fca"
    submit_json(flowc, models / "mlp.onnx", artifact)
    x = np.load(models / "mlp_input.npy")
    expected = onnxruntime_outputs(models / "mlp.onnx", {"x": x})["y"]
    workdir = tmp_path / "empty"
    workdir.mkdir()
    run = [artifact, "--input", f"x={models / 'mlp_input.npy'}"]
    # Plain: name and shape, then the first values; no file anywhere in cwd.
    result = cli("run", *run, cwd=workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "y [4,8]", result.stdout
    assert lines[1].endswith("... (32 values)"), result.stdout
    printed = [float(v) for v in lines[1].split("...")[0].split()]
    assert len(printed) >= 1
    np.testing.assert_allclose(printed, expected.flatten()[:len(printed)], rtol=1e-4,
                               atol=1e-5)
    assert list(workdir.iterdir()) == []
    # --json without --output-dir: `values` (the first --print N), no `file`.
    result = cli("run", *run, "--json", "--print", "3", cwd=workdir)
    assert result.returncode == 0, result.stderr
    [output] = json.loads(result.stdout)["outputs"]
    assert output["name"] == "y" and output["shape"] == [4, 8]
    assert "file" not in output and len(output["values"]) == 3
    np.testing.assert_allclose(output["values"], expected.flatten()[:3], rtol=1e-4, atol=1e-5)
    assert list(workdir.iterdir()) == []
    # --output-dir: the file is there, JSON names it.
    out_dir = tmp_path / "out"
    result = cli("run", *run, "--json", "--output-dir", out_dir, cwd=workdir)
    assert result.returncode == 0, result.stderr
    [output] = json.loads(result.stdout)["outputs"]
    assert output["file"] == str(out_dir / "y.npy")
    assert_close(np.load(output["file"]), expected)
    assert list(workdir.iterdir()) == []
    # An --output-dir that cannot be made (under a regular file) fails first.
    regular = tmp_path / "regular"
    regular.write_text("not a directory")
    result = cli("run", *run, "--output-dir", regular / "sub", cwd=workdir)
    assert result.returncode == BAD, result.stderr
    line = one_line(result.stderr)
    assert line.startswith("flowc: error: ") and "--output-dir" in line
    assert str(regular / "sub") in line
    assert result.stdout == ""
    # ... before the artifact is even opened.
    result = cli("run", tmp_path / "missing.fca", "--input", f"x={models / 'mlp_input.npy'}",
                 "--output-dir", regular / "sub", cwd=workdir)
    assert result.returncode == BAD and "--output-dir" in result.stderr
    assert list(workdir.iterdir()) == []


# --- 10. -o into a missing directory, -o naming a directory ----------------------

def test_bad_output_paths_fail_before_compiling(flowc, tmp_path, models):
    # -o under a directory that does not exist: exit 3 naming both.
    out = tmp_path / "nodir" / "x.fca"
    result = flowc.run("submit", models / "mlp.onnx", "-o", out, check=False)
    assert result.returncode == BAD, result.stderr
    line = one_line(result.stderr)
    assert line.startswith("flowc: error: ")
    assert str(out) in line and f"'{tmp_path / 'nodir'}' does not exist" in line
    assert not (tmp_path / "nodir").exists()
    # -o naming an existing directory.
    result = flowc.run("submit", models / "mlp.onnx", "-o", tmp_path, check=False)
    assert result.returncode == BAD, result.stderr
    line = one_line(result.stderr)
    assert str(tmp_path) in line and "is a directory" in line
    # Nothing was compiled, nothing looked up, nothing stored.
    stats = stats_of(flowc.cache_dir, flowc.socket)
    assert stats["misses"] == 0 and stats["blobs"] == 0
    assert all(kind["misses"] == 0 and kind["hits"] == 0 for kind in stats["kinds"].values()), \
        stats["kinds"]


# --- 11. cache statistics ---------------------------------------------------------

COUNTERS = ("hits", "misses", "evictions", "evicted_bytes")
SHARED = ("blobs", "bytes", "actions", "hits", "misses", "hit_rate", "kinds", "max_bytes")


def test_cache_stats_per_kind_zeroing_and_evictions(flowc, tmp_path, models):
    # Before any lookup: rates are null, for the total and each kind.
    stats = stats_of(flowc.cache_dir, flowc.socket)
    assert stats["hits"] == 0 and stats["misses"] == 0 and stats["hit_rate"] is None
    assert set(stats["kinds"]) == {"artifact", "code", "kernel", "derived"}
    for kind in stats["kinds"].values():
        assert kind == {"hits": 0, "misses": 0, "hit_rate": None}
    # A miss, then a hit.
    assert submit_json(flowc, models / "mlp.onnx", tmp_path / "a.fca")["cache"] == "miss"
    assert submit_json(flowc, models / "mlp.onnx", tmp_path / "a.fca")["cache"] == "hit"
    stats = stats_of(flowc.cache_dir, flowc.socket)
    assert stats["kinds"]["artifact"] == {"hits": 1, "misses": 1, "hit_rate": 0.5}
    assert stats["hits"] >= 1 and stats["misses"] >= 1
    assert stats["hit_rate"] == pytest.approx(stats["hits"] / (stats["hits"] + stats["misses"]))
    assert stats["kinds"]["code"]["misses"] == 1 and stats["kinds"]["kernel"]["misses"] >= 1
    # status --json carries the same figures under the same names.
    result = flowc.run("status", "--json")
    status = json.loads(result.stdout)
    assert {k: status[k] for k in SHARED} == {k: stats[k] for k in SHARED}
    # --zero answers with the figures from before ...
    result = flowc.run("cache", "stats", "--zero", "--json")
    assert json.loads(result.stdout) == stats
    # ... and every counter is 0 afterwards; the contents stay.
    zeroed = stats_of(flowc.cache_dir, flowc.socket)
    for key in COUNTERS:
        assert zeroed[key] == 0, key
    assert zeroed["hit_rate"] is None
    for kind in zeroed["kinds"].values():
        assert kind == {"hits": 0, "misses": 0, "hit_rate": None}
    assert zeroed["blobs"] == stats["blobs"] and zeroed["bytes"] == stats["bytes"]
    # clear empties the cache but is no eviction.
    result = flowc.run("cache", "clear", "--json")
    assert json.loads(result.stdout)["evicted_blobs"] > 0
    cleared = stats_of(flowc.cache_dir, flowc.socket)
    assert cleared["blobs"] == 0 and cleared["evictions"] == 0
    # gc down to 0 bytes is.
    submit_json(flowc, models / "mlp.onnx", tmp_path / "b.fca")
    result = flowc.run("cache", "gc", "--max-size", "0", "--json")
    evicted = json.loads(result.stdout)["evicted_blobs"]
    assert evicted > 0
    after = stats_of(flowc.cache_dir, flowc.socket)
    assert after["evictions"] == evicted and after["evicted_bytes"] > 0


# --- 12. kernels and timings in the submit report --------------------------------

def test_submit_reports_kernels_timings_and_transfer(flowc, tmp_path, models):
    # Same graphs, other weight values.
    other = tmp_path / "seed7"
    subprocess.run([str(ROOT / ".venv" / "bin" / "python"),
                    str(ROOT / "examples" / "make_models.py"), str(other), "--seed", "7"],
                   check=True, capture_output=True, timeout=300)
    for name in ("mlp", "cnn"):
        # First compile at -O2: the MLP's generated loop kernels compiled
        # (every node of the CNN is a library kernel, the last writing into
        # the output buffer: it may have none).
        first = submit_json(flowc, models / f"{name}.onnx", tmp_path / f"{name}.fca", "-O", "2")
        for key in ("kernels_compiled", "kernels_reused", "seconds", "daemon_seconds",
                    "artifact_transfer"):
            assert key in first, key
        assert first["cache"] == "miss" and first["code_cache"] == "miss"
        assert first["kernels_compiled"] >= (1 if name == "mlp" else 0), first
        assert isinstance(first["kernels_reused"], int)
        assert first["seconds"] >= first["daemon_seconds"] > 0
        # Other weight values: a new artifact, the same code, nothing compiled.
        second = submit_json(flowc, other / f"{name}.onnx", tmp_path / f"{name}7.fca", "-O", "2")
        assert second["cache"] == "miss" and second["code_cache"] == "hit", second
        assert second["kernels_compiled"] == 0, second
        assert second["artifact_digest"] != first["artifact_digest"]
        assert second["seconds"] >= second["daemon_seconds"] > 0


# --- 13. fast hits: unchanged, linked, copied ---------------------------

def test_cache_hits_link_or_copy_the_cached_artifact(flowc, tmp_path, models):
    model, x, expected = big_model(tmp_path / "big.onnx")
    out = tmp_path / "big.fca"
    first = submit_json(flowc, model, out)
    cached = cas_file(flowc.cache_dir, first["artifact_digest"])
    assert int(first["artifact_digest"].rsplit("/", 1)[1]) > 64 << 10
    assert cached.is_file()
    # Again to the same -o: already in place.
    again = submit_json(flowc, model, out)
    assert again["cache"] == "hit" and again["artifact_transfer"] == "unchanged"
    # A new -o on the same filesystem: a hard link to the read-only CAS file.
    linked = tmp_path / "linked.fca"
    report = submit_json(flowc, model, linked)
    assert report["artifact_transfer"] == "linked"
    assert os.stat(linked).st_ino == os.stat(cached).st_ino
    assert os.stat(linked).st_mode & 0o222 == 0
    # Another filesystem (tmpfs): a copy with the same bytes.
    if os.path.isdir("/dev/shm") and os.stat("/dev/shm").st_dev != os.stat(tmp_path).st_dev:
        shm = pathlib.Path(tempfile.mkdtemp(dir="/dev/shm"))
        try:
            report = submit_json(flowc, model, shm / "big.fca")
            assert report["artifact_transfer"] in ("copied", "cloned"), report
            assert (shm / "big.fca").read_bytes() == cached.read_bytes()
        finally:
            shutil.rmtree(shm)
    # A small artifact is a file in the cache too, and linked as well.
    report = submit_json(flowc, models / "cnn.onnx", tmp_path / "cnn.fca")
    assert report["artifact_transfer"] == "linked"
    # The linked artifact runs.
    assert_close(flowc.execute(linked, {"x": x})["y"], expected)


def test_a_device_or_pipe_as_output_gets_the_bytes_and_stays(flowc, tmp_path, models):
    """-o /dev/null, -o /dev/stdout into a pipe, -o a FIFO: the artifact is
    written into it. A rename over it would replace the device by a file
    (as root, /dev/null itself)."""
    model = models / "cnn.onnx"
    submit_json(flowc, model, tmp_path / "cnn.fca")
    expected = (tmp_path / "cnn.fca").read_bytes()
    # A null device of this test's own: a regression replaces it, not /dev/null.
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        null = None
    if null is not None:
        report = submit_json(flowc, model, null)
        assert report["artifact_transfer"] == "written", report
        assert stat.S_ISCHR(os.stat(null).st_mode)
    # Our stdout is a pipe: the artifact goes there, the report to stderr.
    base = [str(BIN / "flowc"), "--cache-dir", str(flowc.cache_dir), "--socket",
            str(flowc.socket)]
    piped = subprocess.run(base + ["submit", str(model), "-o", "/dev/stdout"],
                           capture_output=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == expected
    assert b"cache hit" in piped.stderr and b"/dev/stdout" in piped.stderr
    # A FIFO with a reader gets the bytes; one without fails at once.
    fifo = tmp_path / "artifact.fifo"
    os.mkfifo(fifo)
    result = flowc.run("submit", model, "-o", fifo, check=False)
    assert result.returncode != 0
    assert f"cannot write '{fifo}': no process reads it" in result.stderr
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    time.sleep(0.2)
    assert flowc.run("submit", model, "-o", fifo).returncode == 0
    assert reader.communicate(timeout=60)[0] == expected
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    # A socket is no place for an artifact: refused before compiling.
    import socket
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "s.sock"))
    result = flowc.run("submit", models / "mlp.onnx", "-o", tmp_path / "s.sock", check=False)
    listener.close()
    assert result.returncode == BAD, result.stderr
    assert "is a socket; name the artifact file" in one_line(result.stderr)


# --- 14. --precision bf16 ---------------------------------------------------------

def test_bf16_is_refused_at_once_without_avx512_and_works_with_it(flowc, tmp_path, models):
    out = tmp_path / "cnn_bf16.fca"
    result = flowc.run("submit", models / "cnn.onnx", "-o", out, "--precision", "bf16",
                       check=False)
    if not bf16_supported():
        # One line naming AVX-512 and suggesting fp32, exit 4 ...
        assert_bf16_refused(result)
        assert not out.exists()
        # ... before compiling anything.
        stats = stats_of(flowc.cache_dir, flowc.socket)
        assert stats["blobs"] == 0
        assert all(kind["misses"] == 0 for kind in stats["kinds"].values()), stats["kinds"]
    else:
        assert result.returncode == 0, result.stderr
        x = {"image": np.load(models / "cnn_input.npy")}
        assert_close(flowc.execute(out, x)["probs"],
                     onnxruntime_outputs(models / "cnn.onnx", x)["probs"], rtol=5e-2)
        report = json.loads(flowc.run("inspect", out, "--json").stdout)
        assert "precision=bf16" in report["options"]


# --- 15. FIFOs ------------------------------------------------------------------

def test_a_fifo_is_refused_at_once_wherever_a_file_is_read(tmp_path):
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    cache, socket = tmp_path / "cache", tmp_path / "s.sock"
    # No writer ever opens the FIFO: each command must answer, not wait.
    submit = cli("--cache-dir", cache, "--socket", socket, "submit", fifo, timeout=20)
    assert submit.returncode == 3, submit.stderr
    assert one_line(submit.stderr).startswith("flowc: error: cannot read model")
    assert "not a regular file" in submit.stderr
    run = cli("run", fifo, timeout=20)
    assert run.returncode == 3, run.stderr
    assert "is not a regular file" in run.stderr
    daemon = daemon_cli("--cache-dir", cache, "--socket", socket, "--config", fifo,
                        timeout=20)
    assert daemon.returncode == 2, daemon.stderr
    assert "is not a regular file" in daemon.stderr
