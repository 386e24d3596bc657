"""The connection to flowcd: the same socket, cache and auto-start as the
CLI (cli/Common.cpp GlobalOptions::resolve, DaemonClient::connect)."""
import errno
import getpass
import os
import pathlib
import socket
import stat
import subprocess
import time

import grpc

from . import errors
from ._runtime import bin_dir

# As the CLI's auto-start: the daemon exits after an hour without work.
AUTOSTART_IDLE_TIMEOUT = "1h"
AUTOSTART_WAIT_SECONDS = 30
# sockaddr_un's sun_path holds 108 bytes with the terminating NUL.
MAX_UNIX_SOCKET_PATH = 107


def default_cache_dir():
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "flowc")
    return os.path.join(os.environ.get("HOME") or "/tmp", ".cache", "flowc")


def client_identity():
    """"user@host", whom the daemon's fair share and supersede count a
    submit for (as cli/Submit.cpp clientIdentity)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


class Connection:
    """A channel to the local daemon and the stubs over it. Thread-safe (as
    gRPC channels are)."""

    def __init__(self, cache_dir=None, socket_path=None, autostart=None):
        self.cache_dir = os.path.normpath(os.path.abspath(
            cache_dir or os.environ.get("FLOWC_CACHE_DIR") or default_cache_dir()))
        if autostart is None:
            autostart = os.environ.get("FLOWC_AUTOSTART", "1") != "0"
        self.autostart = autostart
        daemon = os.environ.get("FLOWC_DAEMON", "")
        if daemon.startswith("unix:") and not socket_path:
            socket_path = daemon[len("unix:"):]
        elif daemon and not socket_path:
            raise errors.Unsupported(
                f"FLOWC_DAEMON={daemon!r}: the Python client talks to a local daemon on a "
                "unix socket (unix:/PATH); submit to a remote one with `flowc submit`",
                kind="unimplemented")
        self.socket_path = os.fspath(socket_path or os.environ.get("FLOWC_SOCKET")
                                     or os.path.join(self.cache_dir, "flowcd.sock"))
        if len(os.fsencode(self.socket_path)) > MAX_UNIX_SOCKET_PATH:
            raise errors.InvalidModel(
                f"socket path '{self.socket_path}' is {len(self.socket_path)} bytes; unix "
                f"sockets allow at most {MAX_UNIX_SOCKET_PATH} (set a shorter FLOWC_SOCKET "
                "or cache_dir)")
        self._channel = None

    def _check_owner(self):
        """The socket is this user's: a socket of another user's daemon
        would get this user's models (the CLI refuses it too)."""
        try:
            info = os.lstat(self.socket_path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(info.st_mode):
            raise errors.FailedPrecondition(
                f"'{self.socket_path}' is not a socket (see FLOWC_SOCKET)")
        if info.st_uid != os.getuid():
            raise errors.PermissionDenied(
                f"the daemon socket '{self.socket_path}' belongs to uid {info.st_uid}, not "
                f"to you (uid {os.getuid()})", kind="permission_denied")

    def _listening(self):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.socket_path)
            return 0
        except OSError as error:
            return error.errno or errno.ECONNREFUSED
        finally:
            probe.close()

    def _new_channel(self):
        # A channel of its own subchannel: after an auto-start, one whose
        # first attempt failed would wait out gRPC's reconnect backoff.
        return grpc.insecure_channel("unix:" + self.socket_path,
                                     options=[("grpc.use_local_subchannel_pool", 1)])

    def channel(self):
        """The channel, connecting (and starting flowcd) on first use."""
        if self._channel is not None:
            return self._channel
        self._check_owner()
        refused = self._listening()
        if refused in (errno.EACCES, errno.EPERM):
            raise errors.Unavailable(f"cannot connect to the daemon socket "
                                     f"'{self.socket_path}': permission denied")
        if refused == 0:
            self._channel = self._new_channel()
            return self._channel
        if not self.autostart:
            raise errors.Unavailable(f"no flowcd is listening on '{self.socket_path}' "
                                     "(FLOWC_AUTOSTART=0)", kind="unavailable")
        self._channel = self._start_daemon()
        return self._channel

    def _start_daemon(self):
        where = bin_dir()
        flowcd = where / "flowcd" if where else None
        if flowcd is None or not flowcd.is_file():
            raise errors.Unavailable(
                f"no flowcd is listening on '{self.socket_path}' and none can be started: "
                f"{flowcd or 'no flowc on PATH'} does not exist (set FLOWC_BIN_DIR)",
                kind="unavailable")
        os.makedirs(self.cache_dir, exist_ok=True)
        log = os.path.join(self.cache_dir, "flowcd.log")
        with open(log, "ab") as out:
            # A session of its own: the daemon outlives this process and
            # never gets the notebook's Ctrl-C.
            subprocess.Popen([str(flowcd), "--cache-dir", self.cache_dir, "--socket",
                              self.socket_path, "--log-file", log, "--idle-timeout",
                              AUTOSTART_IDLE_TIMEOUT], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=out, start_new_session=True, close_fds=True)
        from .v1 import flowc_pb2, flowc_pb2_grpc

        deadline = time.monotonic() + AUTOSTART_WAIT_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.02)
            channel = self._new_channel()
            try:
                flowc_pb2_grpc.AdminStub(channel).Health(flowc_pb2.HealthRequest(), timeout=0.5)
                return channel
            except grpc.RpcError:
                channel.close()
        raise errors.Unavailable(f"started flowcd but it does not answer on "
                                 f"'{self.socket_path}'; see {log}", kind="unavailable")

    def compiler(self):
        from .v1 import flowc_pb2_grpc

        return flowc_pb2_grpc.CompilerStub(self.channel())

    def admin(self):
        from .v1 import flowc_pb2_grpc

        return flowc_pb2_grpc.AdminStub(self.channel())

    def close(self):
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def artifact_size(digest):
    """The size a digest "sha256:<hex>/<size>" gives; 0 if none."""
    try:
        return int(digest.rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return 0


def fetch_artifact(connection, digest, output):
    """Streams the artifact `digest` from the daemon into `output`
    atomically (a temp file beside it, then rename)."""
    from .v1 import flowc_pb2

    output = pathlib.Path(output)
    tmp = output.with_name(output.name + f".{os.getpid()}.part")
    try:
        with open(tmp, "wb") as out:
            for chunk in connection.compiler().FetchArtifact(
                    flowc_pb2.FetchArtifactRequest(digest=digest)):
                out.seek(chunk.offset)
                out.write(chunk.data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, output)
    except grpc.RpcError as rpc:
        raise errors.from_rpc(rpc) from None
    finally:
        tmp.unlink(missing_ok=True)


def place_artifact(source, size, output):
    """Puts the daemon's cache file `source` at `output` without copying
    where it can (a hard link), else copies it; atomically. False when
    `source` is not a file of `size` bytes (then the caller streams it)."""
    try:
        if not stat.S_ISREG(os.stat(source).st_mode) or os.stat(source).st_size != size:
            return False
    except OSError:
        return False
    output = pathlib.Path(output)
    tmp = output.with_name(output.name + f".{os.getpid()}.part")
    tmp.unlink(missing_ok=True)
    try:
        try:
            os.link(source, tmp)
        except OSError:
            import shutil

            shutil.copyfile(source, tmp)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return True
