"""Fixtures and helpers for the remote cache tests (a module of its own,
not a conftest.py: tests/e2e/conftest.py is the `conftest` that e2e modules
import, and one pytest run collects both directories): real servers on loopback
(servers.py), started per module and stopped after it, and a client that
runs build/bin/remote_cache_probe against them."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import BuildGridCache, NginxCache  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "build" / "bin" / "remote_cache_probe"


def digest_of_file(path):
    """flowc's digest text of a file, hashed in 1 MiB pieces."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return f"sha256:{h.hexdigest()}/{size}"


def digest_of(data: bytes):
    return f"sha256:{hashlib.sha256(data).hexdigest()}/{len(data)}"


class ProbeResult:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.json = json.loads(proc.stdout) if proc.stdout.strip() else None

    def __repr__(self):
        return f"rc={self.rc} stdout={self.stdout[:500]!r} stderr={self.stderr[:500]!r}"


class Client:
    """remote_cache_probe bound to one endpoint and its options."""

    def __init__(self, url, *options):
        if not PROBE.exists():
            pytest.fail(f"{PROBE} missing: bash scripts/build.sh remote_cache_probe")
        self.url = url
        self.options = list(options)

    def command(self, *args):
        return [str(PROBE), self.url, *self.options, *map(str, args)]

    def run(self, *args, timeout=600):
        return ProbeResult(subprocess.run(self.command(*args), capture_output=True, text=True,
                                          timeout=timeout))

    def ok(self, *args, timeout=600):
        result = self.run(*args, timeout=timeout)
        assert result.rc == 0, result
        return result.json

    def with_options(self, *options):
        return Client(self.url, *self.options, *options)


def client_for(server):
    if isinstance(server, BuildGridCache):
        return Client(server.url, "--instance", server.instance)
    return Client(server.url)


@pytest.fixture(scope="module")
def nginx_cache(tmp_path_factory):
    server = NginxCache(tmp_path_factory.mktemp("nginx")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def buildgrid_cache(tmp_path_factory):
    server = BuildGridCache(tmp_path_factory.mktemp("buildgrid")).start()
    yield server
    server.stop()


@pytest.fixture(params=["nginx", "buildgrid"])
def server(request):
    """Each server in turn (module-scoped: tests must not stop it)."""
    return request.getfixturevalue(f"{request.param}_cache")
