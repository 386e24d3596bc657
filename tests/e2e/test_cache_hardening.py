"""Issue 13, files and cache: no stale hit when only external data changed,
external data opened beneath the model's directory without following
symlinks (the swap race), a cache other users cannot read, hits on a full
disk, verify that tells unreadable from corrupt, and read-only caches.
Mounts (tmpfs, read-only bind) need root; those tests skip otherwise."""
import json
import os
import pathlib
import socket
import stat
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from conftest import tmpfs_mount, BIN, Flowc, assert_close, onnxruntime_outputs

N = 64


def external_model(directory: pathlib.Path, seed: int, name="m") -> pathlib.Path:
    """y = x @ w with w (N x N float32) in `name`.data next to `name`.onnx."""
    directory.mkdir(parents=True, exist_ok=True)
    w = np.random.default_rng(seed).standard_normal((N, N)).astype(np.float32)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, N])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, N])],
        [numpy_helper.from_array(w, "w")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)],
                                   ir_version=8)
    path = directory / f"{name}.onnx"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{name}.data", size_threshold=0)
    return path


def rewrite_in_place(data: pathlib.Path, seed: int, keep_mtime: bool):
    """New weights of the same size written into the same inode; with
    keep_mtime the old mtime is put back, as `touch -d` would."""
    before = data.stat()
    values = np.random.default_rng(seed).standard_normal((N, N)).astype(np.float32)
    with open(data, "r+b") as f:
        f.write(values.tobytes())
    if keep_mtime:
        os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert data.stat().st_size == before.st_size and data.stat().st_ino == before.st_ino


def age_past_racy_window(*paths):
    """Files changed within 2 s are never memoized; ctime cannot be set back."""
    for path in paths:
        os.utime(path, (time.time() - 60, time.time() - 60))
    time.sleep(2.1)


def check_outputs(flowc, model, artifact):
    x = np.random.default_rng(7).standard_normal((1, N)).astype(np.float32)
    assert_close(flowc.execute(artifact, {"x": x})["y"],
                 onnxruntime_outputs(model, {"x": x})["y"])


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["rewrite", "rewrite-touch-d"])
def test_rewritten_external_data_is_a_miss_with_the_new_weights(flowc, tmp_path, keep_mtime):
    model = external_model(tmp_path / "models", seed=1)
    data = model.with_suffix(".data")
    age_past_racy_window(model, data)
    assert flowc.submit(model, tmp_path / "a.fca")["cache"] == "miss"
    # The memo now answers without reading the model.
    assert flowc.submit(model, tmp_path / "a.fca")["cache"] == "hit"
    rewrite_in_place(data, seed=2, keep_mtime=keep_mtime)
    answer = flowc.submit(model, tmp_path / "b.fca")
    # Same shapes: the code is reused and only the weights are re-linked.
    assert answer["cache"] == "miss" and answer["code_cache"] == "hit", answer
    check_outputs(flowc, model, tmp_path / "b.fca")


def test_a_symlink_swapped_in_for_external_data_is_never_followed(flowc, tmp_path):
    """The issue's race: the data file swapped for a symlink to a file the
    submitter may not read (/etc/shadow there; here a secret of the data
    file's exact size, so that following the link would yield valid weights)."""
    model = external_model(tmp_path / "models", seed=3)
    data = model.with_suffix(".data")
    real = tmp_path / "models" / "real.data"
    os.link(data, real)
    secret = tmp_path / "outside" / "secret"
    secret.parent.mkdir()
    marker = b"SECRET-FLOWC-13!"
    secret.write_bytes(marker * (data.stat().st_size // len(marker)))
    assert secret.stat().st_size == data.stat().st_size
    stop = threading.Event()

    def swap():
        link = tmp_path / "models" / "swap.link"
        hard = tmp_path / "models" / "swap.hard"
        while not stop.is_set():
            os.symlink(secret, link)
            os.replace(link, data)
            os.link(real, hard)
            os.replace(hard, data)

    swapper = threading.Thread(target=swap)
    swapper.start()
    outcomes = []
    try:
        for i in range(50):
            out = tmp_path / f"out{i}.fca"
            result = flowc.run("submit", model, "-o", out, check=False)
            if result.returncode == 0:
                assert marker not in out.read_bytes(), f"submit {i} served the secret"
                outcomes.append("ok")
                continue
            assert result.returncode == 3, result.stderr
            assert "external data location 'm.data' is a symlink" in result.stderr, \
                result.stderr
            outcomes.append("refused")
    finally:
        stop.set()
        swapper.join()
    # Nothing in the cache holds the secret either.
    for path in flowc.cache_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert marker not in path.read_bytes(), path
    assert len(outcomes) == 50


def test_external_data_that_is_a_symlink_is_refused_naming_it(flowc, tmp_path):
    model = external_model(tmp_path / "models", seed=4)
    data = model.with_suffix(".data")
    # Even a link that stays inside the model's directory is not followed.
    data.rename(tmp_path / "models" / "elsewhere.data")
    data.symlink_to("elsewhere.data")
    result = flowc.run("submit", model, "-o", tmp_path / "m.fca", check=False)
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("flowc: error: ")
    assert "'w': external data location 'm.data' is a symlink or passes through one" \
        in result.stderr, result.stderr
    assert not (tmp_path / "m.fca").exists()


def test_everything_in_a_fresh_cache_is_the_owners_only(tmp_path):
    client = Flowc(tmp_path)
    old = os.umask(0)  # modes must come from flowc, not from the umask
    try:
        client.run("daemon", "start")
        model = external_model(tmp_path / "models", seed=5)
        client.submit(model, tmp_path / "m.fca")
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(client.socket.stat().st_mode) == 0o600
        checked = 0
        for path in [client.cache_dir, *client.cache_dir.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            if path.is_dir():
                assert mode == 0o700, (path, oct(mode))
            elif path.parent.parent.name == "cas":
                assert mode == 0o400, (path, oct(mode))
            else:
                assert mode == 0o600, (path, oct(mode))
            checked += 1
        names = {p.name for p in client.cache_dir.iterdir()}
        assert {"cas", "tmp", "index.sqlite", "flowcd.log"} <= names, names
        assert checked > 5
    finally:
        client.run("daemon", "stop", check=False)


def test_an_older_caches_modes_are_restricted_at_start(tmp_path):
    client = Flowc(tmp_path)
    client.cache_dir.mkdir(mode=0o755)
    os.chmod(client.cache_dir, 0o755)
    client.run("daemon", "start")
    try:
        assert stat.S_IMODE(client.cache_dir.stat().st_mode) == 0o700
        log = (client.cache_dir / "flowcd.log").read_text()
        assert "cache restricted mode path=" + str(client.cache_dir) in log, log
    finally:
        client.run("daemon", "stop", check=False)


@pytest.fixture
def tmpfs(tmp_path):
    with tmpfs_mount(tmp_path / "disk", "64m") as mount:
        yield mount


def fill(directory: pathlib.Path) -> pathlib.Path:
    """Writes until the filesystem is full; returns the filler."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while f.write(b"\0" * size):
                    pass
            except OSError:
                pass
    return filler


def test_a_full_disk_serves_hits_and_verify_keeps_healthy_blobs(tmp_path, tmpfs):
    client = Flowc(tmp_path)
    client.cache_dir = tmpfs / "cache"
    client.run("daemon", "start")
    try:
        cached = external_model(tmp_path / "models", seed=6)
        assert client.submit(cached, tmp_path / "a.fca")["cache"] == "miss"
        def blobs():
            listed = json.loads(client.run("cache", "ls", "--limit", "100000", "--json").stdout)
            return {blob["digest"] for blob in listed}

        before = blobs()
        filler = fill(tmpfs)
        # A hit writes nothing that matters: exit 0, the artifact placed.
        answer = client.submit(cached, tmp_path / "hit.fca")
        assert answer["cache"] == "hit", answer
        check_outputs(client, cached, tmp_path / "hit.fca")
        # A miss needs space: exit 5, naming the disk's state and the cache.
        other = external_model(tmp_path / "other", seed=7, name="o")
        result = client.run("submit", other, "-o", tmp_path / "o.fca", check=False)
        assert result.returncode == 5, result.stderr
        assert "no space left on device" in result.stderr.lower(), result.stderr
        assert str(client.cache_dir) in result.stderr, result.stderr
        assert not (tmp_path / "o.fca").exists()
        # Healthy blobs are healthy, and repair quarantines none of them.
        report = json.loads(client.run("cache", "verify", "--json").stdout)
        assert report["ok"] and report["corrupt"] == [] and report["unreadable"] == [], report
        repaired = json.loads(client.run("cache", "verify", "--repair", "--json").stdout)
        assert repaired["quarantined"] == 0 and repaired["ok"], repaired
        assert not (client.cache_dir / "quarantine").exists()
        # Nothing was lost: with space again, every blob is there, still a hit.
        filler.unlink()
        assert before <= blobs()
        assert client.submit(cached, tmp_path / "again.fca")["cache"] == "hit"
    finally:
        client.run("daemon", "stop", check=False)


def accepts(path: pathlib.Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


def flowcd(*args, **kwargs):
    return subprocess.run([str(BIN / "flowcd"), *map(str, args)], capture_output=True,
                          text=True, timeout=120, **kwargs)


@pytest.fixture
def read_only_cache(tmp_path):
    """A cache with one model compiled in it, then bind-mounted read-only."""
    client = Flowc(tmp_path)
    client.run("daemon", "start")
    model = external_model(tmp_path / "models", seed=8)
    client.submit(model, tmp_path / "first.fca")
    client.run("daemon", "stop")
    mount = tmp_path / "ro"
    mount.mkdir()
    for command in (["mount", "--bind", str(client.cache_dir), str(mount)],
                    ["mount", "-o", "remount,bind,ro", str(mount)]):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)
            pytest.skip(f"cannot make a read-only bind mount: {result.stderr.strip()}")
    yield mount, model
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_read_only_cache_is_refused_at_start(tmp_path, read_only_cache):
    mount, _ = read_only_cache
    result = flowcd("--cache-dir", mount, "--socket", tmp_path / "ro.sock")
    assert result.returncode == 5, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (f"flowcd: error: cache directory '{mount}' is not writable "
                         "(Read-only file system); start flowcd with --read-only to serve "
                         "what it has cached"), result.stderr


def test_read_only_serves_hits_and_refuses_misses_clearly(tmp_path, read_only_cache):
    mount, model = read_only_cache
    client = Flowc(tmp_path)
    client.cache_dir = mount
    client.socket = tmp_path / "ro.sock"
    daemon = subprocess.Popen([str(BIN / "flowcd"), "--cache-dir", str(mount), "--socket",
                               str(client.socket), "--read-only", "--log-file",
                               str(tmp_path / "ro.log")])
    try:
        while not accepts(client.socket):
            assert daemon.poll() is None, (tmp_path / "ro.log").read_text()
            time.sleep(0.05)
        stats_before = client.run("cache", "stats", "--json").stdout
        answer = client.submit(model, tmp_path / "hit.fca")
        assert answer["cache"] == "hit", answer
        check_outputs(client, model, tmp_path / "hit.fca")
        other = external_model(tmp_path / "other", seed=9, name="o")
        result = client.run("submit", other, "-o", tmp_path / "o.fca", check=False)
        assert result.returncode == 5, result.stderr
        assert (f"the cache '{mount}' is read-only (--read-only); cannot compile "
                f"{other}") in result.stderr, result.stderr
        # Counters are not written either.
        assert client.run("cache", "stats", "--json").stdout == stats_before
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
