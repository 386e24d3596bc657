"""The daemon's front door: TCP needs TLS and bearer tokens (or plaintext on
loopback for development), each token's role bounds what it may call, a
refused call changes nothing, model paths are named only on the unix
socket, and only for a file that the peer's uid could read."""
import hashlib
import json
import os
import pathlib
import pwd
import re
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest

import make_models
from conftest import BIN, save

TOKENS = {"reader": ("read", "tok-read-5f1c"), "builder": ("submit", "tok-submit-a9e0"),
          "ops": ("admin", "tok-admin-77d2")}
UNAUTHENTICATED, PERMISSION_DENIED, FAILED_PRECONDITION, UNAVAILABLE = 16, 7, 9, 14


def environment(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWC_")}
    env["FLOWC_AUTOSTART"] = "0"
    env.update(extra)
    return env


def run(*cmd, env=None, timeout=120):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, env=env or environment())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost and a client
    certificate, all made by openssl here."""
    d = tmp_path_factory.mktemp("pki")

    def openssl(*args):
        result = run("openssl", *args)
        assert result.returncode == 0, result.stderr

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "ca.key",
            "-out", d / "ca.pem", "-days", "2", "-subj", "/CN=flowc test CA")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", d / f"{name}.key",
                "-out", d / f"{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", d / f"{name}.csr", "-CA", d / "ca.pem", "-CAkey",
                d / "ca.key", "-CAcreateserial", "-out", d / f"{name}.pem", "-days", "2",
                "-extfile", d / "san.ext")
        os.chmod(d / f"{name}.key", 0o600)
    return d


def tokens_file(directory: pathlib.Path) -> pathlib.Path:
    path = directory / "tokens"
    lines = ["# name role sha256 of the token"]
    for name, (role, token) in TOKENS.items():
        lines.append(f"{name} {role} sha256:{hashlib.sha256(token.encode()).hexdigest()}")
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


class Daemon:
    """flowcd in the foreground on a unix socket and 127.0.0.1:<free port>;
    waits for its start-up line and always stops it."""

    def __init__(self, directory: pathlib.Path, *args):
        self.dir = directory
        self.cache_dir = directory / "cache"
        self.socket = directory / "flowcd.sock"
        self.log = directory / "flowcd.log"
        self.args = [str(a) for a in args]

    def __enter__(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(BIN / "flowcd"), "--cache-dir", str(self.cache_dir), "--socket",
             str(self.socket), "--log-file", str(self.log), "--listen", "127.0.0.1:0",
             *self.args], env=environment(), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        for _ in range(600):
            if self.process.poll() is not None:
                raise AssertionError(f"flowcd exited: {self.process.stderr.read()}")
            text = self.log.read_text() if self.log.exists() else ""
            match = re.search(r"listening .* tcp=127\.0\.0\.1:(\d+)", text)
            if match:
                self.port = int(match.group(1))
                return self
            time.sleep(0.05)
        raise AssertionError("flowcd did not start")

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)

    def local(self, *args):
        return run(BIN / "flowc", "--cache-dir", self.cache_dir, "--socket", self.socket,
                   *args)

    def tcp(self, *args, scheme="grpcs", token=None, ca=None, env=None):
        """flowc over TCP; the token travels in FLOWC_TOKEN, as a CI job's would."""
        extra = {} if token is None else {"FLOWC_TOKEN": token}
        ca_args = [] if ca is None else ["--tls-ca", ca]
        return run(BIN / "flowc", "--daemon", f"{scheme}://127.0.0.1:{self.port}", *ca_args,
                   *args, env=environment(**extra, **(env or {})))

    def probe(self, *args, tls_ca=None):
        target = [f"tls:127.0.0.1:{self.port}", "--ca", tls_ca] if tls_ca else \
            [f"127.0.0.1:{self.port}"]
        result = run(BIN / "front_door_probe", *target, *args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


def cache_stats(daemon):
    result = daemon.local("cache", "stats", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    return stats["blobs"], stats["actions"], stats["bytes"]


@pytest.fixture
def model(tmp_path):
    return save(make_models.make_cnn(np.random.default_rng(0)), tmp_path / "cnn.onnx")


def test_tcp_without_tls_or_tokens_is_refused_at_start(tmp_path, pki):
    cases = [
        (["--listen", "0.0.0.0:7411"], "needs TLS: --tls-cert FILE and --tls-key FILE"),
        (["--listen", "0.0.0.0:7411", "--insecure-loopback"],
         "--listen '0.0.0.0:7411' is not a loopback address"),
        (["--listen", "192.168.0.1:7411", "--insecure-loopback"], "is not a loopback address"),
        (["--listen", "[::]:7411", "--insecure-loopback"], "is not a loopback address"),
        (["--listen", "127.0.0.1:7411", "--tls-cert", pki / "server.pem", "--tls-key",
          pki / "server.key"], "needs --tokens FILE"),
        (["--listen", "127.0.0.1:7411", "--insecure-loopback", "--tls-cert",
          pki / "server.pem", "--tls-key", pki / "server.key"],
         "--insecure-loopback is plaintext"),
        (["--tokens", tmp_path / "tokens"], "they need --listen"),
    ]
    for args, message in cases:
        result = run(BIN / "flowcd", "--cache-dir", tmp_path / "cache", "--socket",
                     tmp_path / "s.sock", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert not (tmp_path / "s.sock").exists()
    # The same refusal from the config file.
    (tmp_path / "cache").mkdir(exist_ok=True)
    (tmp_path / "cache" / "flowcd.conf").write_text(
        "listen = 10.0.0.7:7411\ninsecure-loopback = true\n")
    result = run(BIN / "flowcd", "--cache-dir", tmp_path / "cache", "--socket",
                 tmp_path / "s.sock")
    assert result.returncode == 2 and "is not a loopback address" in result.stderr, \
        result.stderr
    (tmp_path / "cache" / "flowcd.conf").write_text("insecure-loopback = maybe\n")
    result = run(BIN / "flowcd", "--cache-dir", tmp_path / "cache", "--socket",
                 tmp_path / "s.sock")
    assert result.returncode == 2 and "invalid value 'maybe' for insecure-loopback" in \
        result.stderr, result.stderr


def test_private_files_others_can_read_are_refused_at_start(tmp_path, pki):
    tokens = tokens_file(tmp_path)
    tls = ["--listen", "127.0.0.1:0", "--tls-cert", pki / "server.pem", "--tls-key",
           pki / "server.key", "--tokens", tokens]
    base = [BIN / "flowcd", "--cache-dir", tmp_path / "cache", "--socket",
            tmp_path / "s.sock"]
    for path, mode in ((tokens, 0o644), (tokens, 0o660), (pki / "server.key", 0o640)):
        os.chmod(path, mode)
        try:
            result = run(*base, *tls)
        finally:
            os.chmod(path, 0o600)
        assert result.returncode == 1, result.stderr
        assert f"'{path}' has mode {mode:04o}: its group or others may access it; chmod 600" \
            in result.stderr, result.stderr
        assert not (tmp_path / "s.sock").exists()
    # A tokens file with a bad line names it; a certificate that is no PEM too.
    tokens.write_text("ci read not-a-digest\n")
    result = run(*base, *tls)
    assert result.returncode == 1, result.stderr
    assert f"{tokens}:1: the credential of 'ci' is not sha256:" in result.stderr
    tokens_file(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    result = run(*base, "--listen", "127.0.0.1:0", "--tls-cert", garbage, "--tls-key",
                 pki / "server.key", "--tokens", tokens)
    assert result.returncode == 1 and f"--tls-cert '{garbage}' holds no PEM certificate" in \
        result.stderr, result.stderr


def test_token_roles_over_tls(tmp_path, pki, model):
    ca = pki / "ca.pem"
    with Daemon(tmp_path, "--tls-cert", pki / "server.pem", "--tls-key", pki / "server.key",
                "--tokens", tokens_file(tmp_path)) as daemon:
        # Something in the cache, submitted on the unix socket.
        result = daemon.local("submit", model, "-o", tmp_path / "cnn.fca", "--json")
        assert result.returncode == 0, result.stderr
        before = cache_stats(daemon)
        assert before[1] > 0
        outputs = []

        # No token, an unknown token: unauthenticated.
        result = daemon.tcp("status", ca=ca)
        outputs.append(result)
        assert result.returncode == 3, result.stderr
        assert "unauthenticated: no bearer token" in result.stderr, result.stderr
        result = daemon.tcp("cache", "clear", token="tok-guess", ca=ca)
        outputs.append(result)
        assert result.returncode == 3, result.stderr
        assert "unauthenticated: unknown bearer token" in result.stderr, result.stderr
        # A header that is not Bearer.
        reply = daemon.probe("--authorization", "Basic dG9rOmFi", "health", tls_ca=ca)
        assert reply == {"code": UNAUTHENTICATED,
                         "message": "the authorization header is not 'Bearer TOKEN'"}

        # read: status, cache stats, jobs and fetch-side RPCs answer ...
        read = TOKENS["reader"][1]
        result = daemon.tcp("status", "--json", token=read, ca=ca)
        outputs.append(result)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["running"] is True
        result = daemon.tcp("cache", "stats", "--json", token=read, ca=ca)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["actions"] == before[1]
        result = daemon.tcp("jobs", token=read, ca=ca)
        assert result.returncode == 0, result.stderr
        # ... but clear, gc, pin, verify and shutdown need admin, submit needs submit.
        for args, method in ((["cache", "clear"], "Cache.Clear"),
                             (["cache", "gc", "--max-size", "1M"], "Cache.Gc"),
                             (["cache", "verify"], "Cache.Verify"),
                             (["daemon", "stop"], "Admin.Shutdown")):
            result = daemon.tcp(*args, token=read, ca=ca)
            outputs.append(result)
            assert result.returncode == 3, (args, result.stderr)
            assert f"permission denied: token 'reader' has role read; {method} needs admin" \
                in result.stderr, (args, result.stderr)
        reply = daemon.probe("--authorization", f"Bearer {read}", "submit", model,
                             tls_ca=ca)
        assert reply == {"code": PERMISSION_DENIED,
                         "message": "token 'reader' has role read; Compiler.Submit needs "
                                    "submit"}
        # submit: may submit (but not by path over TCP), may not clear.
        build = TOKENS["builder"][1]
        reply = daemon.probe("--authorization", f"Bearer {build}", "submit", model,
                             tls_ca=ca)
        assert reply["code"] == FAILED_PRECONDITION, reply
        assert "over TCP, submit by upload" in reply["message"], reply
        reply = daemon.probe("--authorization", f"bearer {build}", "inspect", model,
                             tls_ca=ca)
        assert reply["code"] == FAILED_PRECONDITION and "submit by upload" in \
            reply["message"], reply
        result = daemon.tcp("cache", "clear", token=build, ca=ca)
        assert result.returncode == 3 and "role submit; Cache.Clear needs admin" in \
            result.stderr, result.stderr
        # A read token cannot upload a model either.
        result = daemon.tcp("submit", model, "-o", tmp_path / "remote.fca", token=read,
                            ca=ca)
        outputs.append(result)
        assert result.returncode == 3 and "needs submit" in result.stderr, result.stderr
        assert not (tmp_path / "remote.fca").exists()
        # Every refusal left the cache as it was, and the daemon up.
        assert cache_stats(daemon) == before
        # The CLI never sends a path to a TCP daemon: it uploads the model.
        result = daemon.tcp("submit", model, "-o", tmp_path / "remote.fca", "--json",
                            token=build, ca=ca)
        outputs.append(result)
        assert result.returncode == 0, result.stderr
        uploaded = json.loads(result.stdout)
        assert uploaded["uploaded_bytes"] == model.stat().st_size, uploaded
        assert (tmp_path / "remote.fca").exists()
        # A plaintext client on the TLS port gets nowhere.
        assert daemon.probe("health")["code"] == UNAVAILABLE

        # admin: clears, then stops the daemon.
        admin = TOKENS["ops"][1]
        result = daemon.tcp("cache", "clear", token=admin, ca=ca)
        assert result.returncode == 0, result.stderr
        assert cache_stats(daemon)[1] == 0
        result = daemon.tcp("daemon", "stop", token=admin, ca=ca)
        assert result.returncode == 0, result.stderr
        daemon.process.wait(timeout=60)

        # No token is ever printed, by the CLI or in the daemon's log.
        log = daemon.log.read_text()
        assert "refused method=/flowc.v1.Cache/Clear token=reader code=PERMISSION_DENIED" \
            in log, log
        for _, token in TOKENS.values():
            assert token not in log
            for result in outputs:
                assert token not in result.stdout + result.stderr


def test_client_certificates_when_the_daemon_asks_for_them(tmp_path, pki):
    with Daemon(tmp_path, "--tls-cert", pki / "server.pem", "--tls-key", pki / "server.key",
                "--tls-client-ca", pki / "ca.pem", "--tokens", tokens_file(tmp_path)) as daemon:
        read = TOKENS["reader"][1]
        result = daemon.tcp("status", token=read, ca=pki / "ca.pem")
        assert result.returncode == 5, result.stderr
        assert "unavailable" in result.stderr, result.stderr
        result = daemon.tcp("status", "--json", "--tls-cert", pki / "client.pem",
                            "--tls-key", pki / "client.key", token=read, ca=pki / "ca.pem")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["running"] is True


def test_insecure_loopback_for_development(tmp_path, model):
    with Daemon(tmp_path, "--insecure-loopback") as daemon:
        # No tokens file: every local client has every role.
        result = daemon.tcp("cache", "stats", "--json", scheme="grpc")
        assert result.returncode == 0, result.stderr
        result = daemon.tcp("cache", "clear", scheme="grpc")
        assert result.returncode == 0, result.stderr
        # Paths are still for the unix socket only.
        reply = daemon.probe("inspect", model)
        assert reply["code"] == FAILED_PRECONDITION and "submit by upload" in \
            reply["message"], reply
    with Daemon(tmp_path / "with-tokens", "--insecure-loopback", "--tokens",
                tokens_file(tmp_path)) as daemon:
        # With a tokens file, tokens are checked on plaintext too.
        result = daemon.tcp("cache", "stats", scheme="grpc")
        assert result.returncode == 3 and "no bearer token" in result.stderr, result.stderr
        result = daemon.tcp("cache", "stats", scheme="grpc", token=TOKENS["reader"][1])
        assert result.returncode == 0, result.stderr


def test_the_cli_refuses_bad_daemon_urls(tmp_path):
    cases = [
        (["--daemon", "grpc://10.1.2.3:7411", "status"],
         "plaintext grpc:// is for loopback only"),
        (["--daemon", "http://127.0.0.1:7411", "status"],
         "expected unix:/PATH, grpc://HOST:PORT or grpcs://HOST:PORT"),
        (["--daemon", "grpcs://127.0.0.1", "status"], "expected unix:/PATH"),
        (["--daemon", "grpcs://127.0.0.1:99999", "status"], "expected unix:/PATH"),
        (["--daemon", "grpcs://127.0.0.1:7411", "--tls-ca", tmp_path / "none.pem", "status"],
         f"--tls-ca '{tmp_path / 'none.pem'}'"),
        (["--daemon", "grpc://127.0.0.1:7411", "--token", "a b", "status"],
         "holds a space or a character that is not printable"),
        (["--token", "abc", "--socket", tmp_path / "s.sock", "status"],
         "are for a TCP --daemon"),
    ]
    for args, message in cases:
        result = run(BIN / "flowc", *args)
        assert result.returncode == 3, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "a b" not in result.stderr
    # Nothing listens there: unavailable, and no daemon is started.
    result = run(BIN / "flowc", "--daemon", "grpc://127.0.0.1:1", "status")
    assert result.returncode == 5 and "unavailable" in result.stderr, result.stderr


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as another user")


@needs_root
def test_a_path_the_peer_cannot_read_is_refused_on_the_unix_socket(tmp_path):
    """The socket is made reachable by everyone (as if shared on purpose):
    the daemon still opens only what the peer's own uid could."""
    nobody = pwd.getpwnam("nobody")
    shared = pathlib.Path(tempfile.mkdtemp(prefix="flowc-fd-"))
    try:
        os.chmod(shared, 0o755)
        secret_dir = shared / "private"
        secret_dir.mkdir(mode=0o700)
        rng = np.random.default_rng(0)
        secret = save(make_models.make_cnn(rng), secret_dir / "secret.onnx")
        os.chmod(secret, 0o600)
        public = save(make_models.make_cnn(rng), shared / "public.onnx")
        os.chmod(public, 0o644)
        root_only = save(make_models.make_cnn(rng), shared / "root-only.onnx")
        os.chmod(root_only, 0o600)
        with Daemon(shared, "--insecure-loopback") as daemon:
            os.chmod(daemon.socket, 0o666)
            before = cache_stats(daemon)
            as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                         "--clear-groups", str(BIN / "front_door_probe"),
                         f"unix:{daemon.socket}"]
            for method in ("submit", "inspect"):
                for path in (secret, root_only):
                    result = run(*as_nobody, method, path)
                    assert result.returncode == 0, result.stderr
                    reply = json.loads(result.stdout)
                    assert reply["code"] == FAILED_PRECONDITION, (method, path, reply)
                    assert reply["message"] == (
                        f"model_path '{path}': the client (uid {nobody.pw_uid}) cannot open "
                        "it: Permission denied (the daemon opens only what its client could)"
                    ), reply
            # Nothing was compiled or recorded for them.
            assert cache_stats(daemon) == before
            # A file nobody may read is served to it; root may read anything.
            result = run(*as_nobody, "inspect", public)
            assert json.loads(result.stdout) == {"code": 0, "message": ""}, result.stdout
            reply = json.loads(run(BIN / "front_door_probe", f"unix:{daemon.socket}",
                                   "inspect", secret).stdout)
            assert reply == {"code": 0, "message": ""}, reply
    finally:
        shutil.rmtree(shared, ignore_errors=True)
