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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reapi"))
from cluster import ClusterError, free_port, reapi_venv, stop_group, tail, wait_until, yaml_str  # noqa: E402

NGINX = Path("/usr/sbin/nginx")


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


def _port_open(port):
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _openssl(*args):
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def make_pki(directory):
    """A test CA, a server certificate it signed for 127.0.0.1 and localhost,
    and a client certificate it signed (CN flowc-ci):
    {"ca": ca.pem, "server_cert", "server_key", "client_cert", "client_key"}."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", d / "ca.key",
             "-out", d / "ca.pem", "-subj", "/CN=flowc-test-ca")
    out = {"ca": d / "ca.pem"}
    for name, cn, ext in (("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                          ("client", "flowc-ci", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", d / f"{name}.key", "-out", d / f"{name}.csr",
                 "-subj", f"/CN={cn}")
        _openssl("x509", "-req", "-in", d / f"{name}.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca.key",
                 "-CAcreateserial", "-days", "2", "-out", d / f"{name}.pem", "-extfile", d / f"{name}.ext")
        out[f"{name}_cert"], out[f"{name}_key"] = d / f"{name}.pem", d / f"{name}.key"
    return out


class _Server:
    """A server process in its own session under `workdir`, on a free port."""

    def __init__(self, workdir, tls, client_certs):
        self.workdir = Path(workdir).resolve()
        self.tls = tls or client_certs
        self.client_certs = client_certs
        self.pki = None
        self.ca_file = None
        self.port = None
        self._proc = None

    def _make_pki(self):
        self.pki = make_pki(self.workdir / "pki")
        self.ca_file = self.pki["ca"]

    def kill(self):
        """SIGKILL the server and its children, as a crash."""
        if self._proc is not None:
            stop_group(self._proc, sig=signal.SIGKILL, grace_s=5)
            self._proc = None

    def _stop(self, sig):
        if self._proc is not None:
            stop_group(self._proc, sig=sig, grace_s=10)
            self._proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class NginxCache(_Server):
    # One line per request: method, the path as sent, status, body bytes in.
    LOG_FORMAT = "$request_method $request_uri $status $request_length"

    def __init__(self, workdir, token=None, tls=False, client_certs=False):
        """token: requests must carry "Authorization: Bearer <token>" (401
        otherwise). tls: https with a certificate from a test CA (ca_file).
        client_certs: also a client certificate from that CA (pki
        "client_cert", "client_key"; 401 without one)."""
        super().__init__(workdir, tls, client_certs)
        self.token = token
        self.root = self.workdir / "root"
        self.access_log = self.workdir / "access.log"
        self.error_log = self.workdir / "error.log"
        self.config = self.workdir / "nginx.conf"

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
        wait_until(lambda: _port_open(self.port), self._proc, "nginx", self.error_log)
        return self

    def _write_config(self):
        tls = ""
        listen = f"127.0.0.1:{self.port}"
        if self.tls:
            self._make_pki()
            listen += " ssl"
            tls = f"ssl_certificate {self.pki['server_cert']};\n    ssl_certificate_key {self.pki['server_key']};"
        if self.client_certs:
            # optional + a check: a missing certificate is a 401, not nginx's 400.
            tls += f"\n    ssl_client_certificate {self.ca_file};\n    ssl_verify_client optional;"
        auth = ""
        if self.token is not None:
            auth = f'if ($http_authorization != "Bearer {self.token}") {{ return 401; }}'
        if self.client_certs:
            auth += '\n      if ($ssl_client_verify != SUCCESS) { return 401; }'
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
        return (self.root / instance if instance else self.root) / "cas" / digest_hex(digest)

    def entry_path(self, key, instance=""):
        return (self.root / instance if instance else self.root) / "ac" / digest_hex(key)

    def tamper(self, digest, instance=""):
        flip_bytes(self.blob_path(digest, instance))

    def stop(self):
        self._stop(signal.SIGQUIT)  # nginx's graceful shutdown

    def logs(self):
        return (f"== nginx error log ({self.error_log})\n{tail(self.error_log)}\n"
                f"== nginx access log ({self.access_log})\n{tail(self.access_log)}")


class BuildGridCache(_Server):
    def __init__(self, workdir, instance="main", tls=False, client_certs=False, allow_updates=True):
        """allow_updates=False: a read-only action cache (Capabilities says
        so, UpdateActionResult is refused). tls: grpcs with a certificate from a test CA (ca_file).
        client_certs: clients must also present a certificate from that CA
        (pki "client_cert", "client_key")."""
        super().__init__(workdir, tls, client_certs)
        self.instance = instance
        self.allow_updates = allow_updates
        self.storage = self.workdir / "storage"
        self.server_log = self.workdir / "bgd.log"
        self.config = self.workdir / "bgd.yml"
        self.venv = None

    @property
    def url(self):
        return f"{'grpcs' if self.tls else 'grpc'}://127.0.0.1:{self.port}"

    def start(self):
        self.venv = reapi_venv()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(exist_ok=True)
        if self.port is None:
            self.port = free_port()
        channel = "    insecure-mode: true"
        if self.tls:
            self._make_pki()
            channel = ("    insecure-mode: false\n    credentials:\n"
                       f"      tls-server-key: {yaml_str(self.pki['server_key'])}\n"
                       f"      tls-server-cert: {yaml_str(self.pki['server_cert'])}")
            if self.client_certs:
                channel += f"\n      tls-client-certs: {yaml_str(self.ca_file)}"
        self.config.write_text(f"""\
server:
  - !channel
    address: "127.0.0.1:{self.port}"
{channel}
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
    allow-updates: {"true" if self.allow_updates else "false"}
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
        wait_until(self._answers, self._proc, "BuildGrid", self.server_log)
        return self

    def _answers(self):
        if not _port_open(self.port):
            return False
        probe = (
            "import grpc,sys\n"
            "from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as r, "
            "remote_execution_pb2_grpc as g\n"
            "rd=lambda p: open(p,'rb').read() if p else None\n"
            "c=grpc.secure_channel(sys.argv[1],grpc.ssl_channel_credentials(rd(sys.argv[3]),rd(sys.argv[5]),"
            "rd(sys.argv[4]))) if sys.argv[3] else grpc.insecure_channel(sys.argv[1])\n"
            "g.CapabilitiesStub(c).GetCapabilities(r.GetCapabilitiesRequest(instance_name=sys.argv[2]),timeout=5)\n"
        )
        pki = self.pki or {}
        client = [pki.get("client_cert", ""), pki.get("client_key", "")] if self.client_certs else ["", ""]
        out = subprocess.run([self.venv / "bin" / "python", "-c", probe, f"127.0.0.1:{self.port}", self.instance,
                              self.ca_file or "", *map(str, client)],
                             capture_output=True, timeout=30)
        return out.returncode == 0

    def blob_path(self, digest):
        h = digest_hex(digest)
        return self.storage / "cas" / "objects" / h[:2] / h[2:]

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

    def stop(self):
        self._stop(signal.SIGTERM)

    def logs(self):
        return f"== BuildGrid ({self.server_log})\n{tail(self.server_log)}"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class Remote:
    """One server of either kind as the daemon's tests use it: its URL and
    instance for --remote-cache, tamper(), kill(), and writes(), the
    requests that changed what it stores (from its own log)."""

    def __init__(self, kind, workdir, **options):
        self.kind = kind
        server_class = NginxCache if kind == "nginx" else BuildGridCache
        self.server = server_class(workdir, **options).start()

    @property
    def url(self):
        return self.server.url

    @property
    def instance(self):
        return getattr(self.server, "instance", "")

    def tamper(self, digest):
        self.server.tamper(digest)

    def writes(self):
        if self.kind == "nginx":
            return [r for r in self.server.requests() if r[0] in ("PUT", "DELETE", "MKCOL")]
        return [m for m in self.server.requests()
                if m in ("Write", "BatchUpdateBlobs", "UpdateActionResult")]

    def kill(self):
        self.server.kill()

    def stop(self):
        self.server.stop()

    def logs(self):
        return self.server.logs()


def start(kind, workdir, **options):
    """A started Remote: kind "nginx" or "buildgrid"."""
    return Remote(kind, workdir, **options)
