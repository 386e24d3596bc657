"""Real remote-cache servers on loopback for flowc's tests, each run as the
current user with every file (config, pid, logs, storage) under its own
directory; no system service is used.

    nginx = NginxCache(tmp_path / "nginx", token="s3cret", tls=True).start()
    nginx.url, nginx.ro_url     # read-write /cache and read-only /ro endpoints
    nginx.requests()            # [(method, path, status)] from its access log
    nginx.tamper(digest)        # flips bytes of the stored CAS blob
    nginx.kill()                # SIGKILL, as a crashed server
    nginx.stop()

    grid = BuildGridCache(tmp_path / "bgd").start()
    grid.url, grid.instance     # grpc://127.0.0.1:PORT, "main"
    grid.tamper(digest); grid.blob_path(digest); grid.stop()

NginxCache: Debian's nginx serving WebDAV PUT as a Bazel HTTP cache
(PREFIX/ac/<hex>, PREFIX/cas/<hex>), with a second location on the same
root that takes only GET and HEAD (`limit_except`), the read-only endpoint.
BuildGridCache: BuildGrid 0.9.1 (.venv-reapi, Python 3.13) with CAS on disk,
an in-memory action cache, ByteStream and Capabilities; no database, no
execution.

Digests are flowc's text form, "sha256:<hex>/<size>". This module only
spawns processes, so it imports under any Python >= 3.9.
"""

import os
import pwd
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reapi"))
from cluster import ClusterError, free_port, reapi_venv, stop_group, tail, yaml_str  # noqa: E402

NGINX = Path("/usr/sbin/nginx")
START_TIMEOUT_S = 60.0


def digest_hex(digest):
    """The hex of "sha256:<hex>/<size>"."""
    m = re.fullmatch(r"sha256:([0-9a-f]{64})/(\d+)", digest)
    if not m:
        raise ValueError(f"not a flowc digest: {digest!r}")
    return m.group(1)


def flip_bytes(path):
    """Flips one byte near the start and one at the end of the file, in place
    (size unchanged, so only the hash can tell)."""
    size = os.path.getsize(path)
    if size == 0:
        raise ValueError(f"{path}: empty, nothing to flip")
    with open(path, "r+b") as f:
        for offset in sorted({min(7, size - 1), size - 1}):
            f.seek(offset)
            byte = f.read(1)
            f.seek(offset)
            f.write(bytes([byte[0] ^ 0xFF]))


def _wait_until(ready, proc, what, log_path, timeout_s=START_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{what} exited with {proc.returncode} while starting:\n{tail(log_path)}")
        if ready():
            return
        time.sleep(0.1)
    raise ClusterError(f"{what} not ready after {timeout_s:g} s:\n{tail(log_path)}")


def _port_open(port):
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def make_self_signed(directory, name="server"):
    """A self-signed certificate for 127.0.0.1 and localhost: (cert, key)."""
    directory = Path(directory)
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


class NginxCache:
    # One line per request: method, the path as sent, status, body bytes in.
    LOG_FORMAT = "$request_method $request_uri $status $request_length"

    def __init__(self, workdir, token=None, tls=False):
        """token: requests must carry "Authorization: Bearer <token>" (401
        otherwise). tls: https with a self-signed certificate (ca_file)."""
        self.workdir = Path(workdir).resolve()
        self.token = token
        self.tls = tls
        self.root = self.workdir / "root"
        self.access_log = self.workdir / "access.log"
        self.error_log = self.workdir / "error.log"
        self.config = self.workdir / "nginx.conf"
        self.ca_file = None
        self.port = None
        self._proc = None

    @property
    def url(self):
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/cache"

    @property
    def ro_url(self):
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/ro"

    def start(self):
        if not NGINX.exists():
            raise ClusterError(f"{NGINX} missing: install nginx (scripts/setup.sh test)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(exist_ok=True)
        for temp in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.workdir / temp).mkdir(exist_ok=True)
        if self.port is None:
            self.port = free_port()
        self._write_config()
        self.access_log.touch()
        log = open(self.workdir / "nginx.out", "ab")
        self._proc = subprocess.Popen(
            [NGINX, "-p", self.workdir, "-c", self.config, "-e", self.error_log],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.workdir,
        )
        log.close()
        _wait_until(lambda: _port_open(self.port), self._proc, "nginx", self.error_log)
        return self

    def _write_config(self):
        tls = ""
        listen = f"127.0.0.1:{self.port}"
        if self.tls:
            cert, key = make_self_signed(self.workdir)
            self.ca_file = cert
            listen += " ssl"
            tls = f"ssl_certificate {cert};\n    ssl_certificate_key {key};"
        auth = ""
        if self.token is not None:
            auth = f'if ($http_authorization != "Bearer {self.token}") {{ return 401; }}'
        # Workers of a root master would run as nobody, who cannot write here.
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
        w = self.workdir
        self.config.write_text(f"""\
{user}
daemon off;
master_process on;
worker_processes 1;
pid {w}/nginx.pid;
error_log {self.error_log} info;
events {{ worker_connections 256; }}
http {{
  client_body_temp_path {w}/client_body;
  proxy_temp_path {w}/proxy;
  fastcgi_temp_path {w}/fastcgi;
  uwsgi_temp_path {w}/uwsgi;
  scgi_temp_path {w}/scgi;
  log_format flowc '{self.LOG_FORMAT}';
  access_log {self.access_log} flowc;
  client_max_body_size 0;
  sendfile on;
  server {{
    listen {listen};
    {tls}
    location /cache/ {{
      alias {self.root}/;
      {auth}
      dav_methods PUT;
      create_full_put_path on;
      dav_access user:rw;
    }}
    location /ro/ {{
      alias {self.root}/;
      {auth}
      limit_except GET HEAD {{ deny all; }}
    }}
  }}
}}
""")

    def requests(self):
        """[(method, path, status)] of every request so far, in order."""
        out = []
        for line in self.access_log.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
                out.append((parts[0], parts[1], int(parts[2])))
        return out

    def blob_path(self, digest, instance=""):
        return self.root / instance / "cas" / digest_hex(digest) if instance else self.root / "cas" / digest_hex(digest)

    def entry_path(self, key, instance=""):
        return (self.root / instance if instance else self.root) / "ac" / digest_hex(key)

    def tamper(self, digest, instance=""):
        flip_bytes(self.blob_path(digest, instance))

    def upload_in_progress(self):
        """Whether nginx is receiving a request body (a temp file under client_body)."""
        return any(p.is_file() and p.stat().st_size > 0 for p in (self.workdir / "client_body").rglob("*"))

    def kill(self):
        """SIGKILL master and workers, as a crashed server."""
        if self._proc is not None:
            stop_group(self._proc, sig=signal.SIGKILL, grace_s=5)
            self._proc = None

    def stop(self):
        if self._proc is not None:
            # SIGQUIT: nginx's graceful shutdown.
            stop_group(self._proc, sig=signal.SIGQUIT, grace_s=10)
            self._proc = None

    def logs(self):
        return (f"== nginx error log ({self.error_log})\n{tail(self.error_log)}\n"
                f"== nginx access log ({self.access_log})\n{tail(self.access_log)}")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class BuildGridCache:
    def __init__(self, workdir, instance="main"):
        self.workdir = Path(workdir).resolve()
        self.instance = instance
        self.storage = self.workdir / "storage"
        self.server_log = self.workdir / "bgd.log"
        self.config = self.workdir / "bgd.yml"
        self.port = None
        self.venv = None
        self._proc = None

    @property
    def url(self):
        return f"grpc://127.0.0.1:{self.port}"

    def start(self):
        self.venv = reapi_venv()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(exist_ok=True)
        if self.port is None:
            self.port = free_port()
        self.config.write_text(f"""\
server:
  - !channel
    address: "127.0.0.1:{self.port}"
    insecure-mode: true
grpc-server-options:
  grpc.so_reuseport: 0
authorization:
  method: none
storages:
  - !disk-storage &cas
    path: {yaml_str(self.storage)}
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: false
instances:
  - name: {yaml_str(self.instance)}
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
thread-pool-size: 32
""")
        with open(self.server_log, "ab") as log:
            self._proc = subprocess.Popen(
                [self.venv / "bin" / "bgd", "server", "start", "-vv", self.config],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.workdir,
            )
        _wait_until(self._answers, self._proc, "BuildGrid", self.server_log)
        return self

    def _answers(self):
        if not _port_open(self.port):
            return False
        probe = (
            "import grpc,sys\n"
            "from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as r, "
            "remote_execution_pb2_grpc as g\n"
            "c=grpc.insecure_channel(sys.argv[1])\n"
            "g.CapabilitiesStub(c).GetCapabilities(r.GetCapabilitiesRequest(instance_name=sys.argv[2]),timeout=5)\n"
        )
        out = subprocess.run([self.venv / "bin" / "python", "-c", probe, f"127.0.0.1:{self.port}", self.instance],
                             capture_output=True, timeout=30)
        return out.returncode == 0

    def blob_path(self, digest):
        h = digest_hex(digest)
        return self.storage / "cas" / "objects" / h[:2] / h[2:]

    def blobs(self):
        """Hex digests of every blob stored, the server's own record of writes."""
        objects = self.storage / "cas" / "objects"
        return sorted(p.parent.name + p.name for p in objects.rglob("*") if p.is_file())

    def tamper(self, digest):
        flip_bytes(self.blob_path(digest))

    def requests(self):
        """The gRPC methods BuildGrid logged receiving (-vv: "Received request.
        ... method="Write" ..."), in order."""
        text = self.server_log.read_text(errors="replace") if self.server_log.exists() else ""
        return re.findall(r'Received request\..*?method="(\w+)"', text)

    def completed_streams(self):
        """("Write" | "Read", "hex/size") for each ByteStream call BuildGrid completed."""
        text = self.server_log.read_text(errors="replace") if self.server_log.exists() else ""
        return re.findall(r'(Write|Read) request completed\. digest="([0-9a-f]+/\d+)"', text)

    def kill(self):
        if self._proc is not None:
            stop_group(self._proc, sig=signal.SIGKILL, grace_s=5)
            self._proc = None

    def stop(self):
        if self._proc is not None:
            stop_group(self._proc, grace_s=10)
            self._proc = None

    def logs(self):
        return f"== BuildGrid ({self.server_log})\n{tail(self.server_log)}"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
