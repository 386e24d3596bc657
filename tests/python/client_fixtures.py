"""Fixtures of the Python client's tests (a module, not a conftest.py:
tests/e2e/conftest.py is the `conftest` one pytest run may also collect;
its helpers are imported from there).

The package is built from python/ once per session, exactly as
`pip install ./python` builds it (grpcio-tools generates the protocol), into
a temp directory put first on sys.path, so the tests always exercise this
tree and never a stale install. Each test gets its own cache and socket
through FLOWC_CACHE_DIR / FLOWC_SOCKET; the client starts the daemon itself
(auto-start, as the CLI) and the fixture stops it."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from conftest import (BIN, Flowc, assert_close, device_target, onnxruntime_outputs,  # noqa: E402,F401
                      save)

TORCH_PYTHON = ROOT / ".venv-torch" / "bin" / "python"


@pytest.fixture(scope="session")
def flowc_package(tmp_path_factory):
    """Where this tree's package was built (and is imported from)."""
    target = tmp_path_factory.mktemp("flowc_package")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--target", str(target), str(ROOT / "python")],
        capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    assert (target / "flowc" / "v1" / "flowc_pb2_grpc.py").is_file()
    sys.path.insert(0, str(target))
    for name in [m for m in sys.modules if m == "flowc" or m.startswith("flowc.")]:
        del sys.modules[name]
    import flowc

    assert pathlib.Path(flowc.__file__).is_relative_to(target), flowc.__file__
    return target


class ClientEnv:
    """A test's daemon environment: the CLI on the same cache and socket
    (for `flowc jobs`), and the environment for subprocesses."""

    def __init__(self, tmp, package):
        self.cli = Flowc(tmp)
        self.cache_dir = self.cli.cache_dir
        self.socket = self.cli.socket
        self.env = {**os.environ, "FLOWC_CACHE_DIR": str(self.cache_dir),
                    "FLOWC_SOCKET": str(self.socket), "FLOWC_BIN_DIR": str(BIN),
                    "PYTHONPATH": str(package)}

    def jobs(self):
        import json

        return json.loads(self.cli.run("jobs", "--json").stdout)["jobs"]


@pytest.fixture
def client(tmp_path, monkeypatch, flowc_package):
    env = ClientEnv(tmp_path, flowc_package)
    for key in ("FLOWC_CACHE_DIR", "FLOWC_SOCKET", "FLOWC_BIN_DIR"):
        monkeypatch.setenv(key, env.env[key])
    for key in ("FLOWC_DAEMON", "FLOWC_AUTOSTART", "FLOWC_RUNTIME_LIB"):
        monkeypatch.delenv(key, raising=False)
    import flowc._compile

    # Each test's daemon is its own: no connection survives from another.
    monkeypatch.setattr(flowc._compile, "_default_connection", None)
    yield env
    connection = flowc._compile._default_connection
    if connection is not None:
        connection.close()
    env.cli.run("daemon", "stop", check=False)
