"""A minimal REAPI worker on the public Bots API (remoteworkers v1test2).

It stands in for buildbox-worker / bb_worker in flowc's integration tests:
neither Debian nor PyPI packages one. flowc never talks to it; it only talks
to the engine (BuildGrid), as any farm worker does.

  .venv-reapi/bin/python tests/reapi/bot.py --url grpc://127.0.0.1:PORT \
      --name bot1 --workdir DIR --log FILE [--instance main] \
      [--property OSFamily=linux ...]

For each lease it fetches the Action's Command and input root from the CAS,
materializes the tree in a fresh scratch directory, runs the command there,
uploads the outputs and completes the lease with an ActionResult. Input
blobs are cached on disk by digest and hard-linked into each scratch
directory, so a large input (the flowc-worker binary) is fetched once per
bot. Each executed command appends one line to --log:
"HASH/SIZE BOT EXIT_CODE".
"""

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import grpc
from google.protobuf import timestamp_pb2

from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2, bytestream_pb2_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc, worker_pb2
from buildgrid._protos.google.rpc import code_pb2

# BuildGrid refuses batch requests whose blobs add up to more than
# 4 MiB - 1 KiB (its MAX_REQUEST_SIZE); stay well below, and send anything
# bigger through ByteStream.
BATCH_LIMIT = 3 * 1024 * 1024
CHUNK = 1024 * 1024
MAX_MESSAGE = 64 * 1024 * 1024
# The engine long-polls an empty session for up to 0.8 x its keepalive
# timeout, capped by our deadline; this deadline only bounds that wait.
POLL_DEADLINE_S = 30.0
RPC_DEADLINE_S = 60.0


def log(name, msg):
    print(f"{time.strftime('%H:%M:%S')} [{name}] {msg}", file=sys.stderr, flush=True)


def digest_of(data):
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def file_digest(path):
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            size += len(block)
    return re_pb2.Digest(hash=h.hexdigest(), size_bytes=size)


def key(digest):
    return f"{digest.hash}/{digest.size_bytes}"


def now_ts():
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


class TaskError(Exception):
    """An action that cannot run; `code` is the google.rpc code the lease reports."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class LeaseCancelled(Exception):
    """The engine dropped or cancelled the lease while its command ran."""


class Cas:
    """CAS + ByteStream client for one instance, with an on-disk blob cache."""

    def __init__(self, channel, instance, cache_dir):
        self.instance = instance
        self.cas = re_grpc.ContentAddressableStorageStub(channel)
        self.bytestream = bytestream_pb2_grpc.ByteStreamStub(channel)
        self.cache_dir = cache_dir
        os.makedirs(cache_dir, exist_ok=True)

    def _resource(self, digest):
        prefix = f"{self.instance}/" if self.instance else ""
        return f"{prefix}blobs/{digest.hash}/{digest.size_bytes}"

    def read_blobs(self, digests):
        """Returns {key: bytes} for the digests, verified; raises TaskError if one is missing."""
        out = {}
        small = []
        for d in {key(d): d for d in digests}.values():
            if d.size_bytes > BATCH_LIMIT:
                out[key(d)] = self._read_stream(d)
            else:
                small.append(d)
        batch, size = [], 0
        for d in small + [None]:
            if d is None or (batch and size + d.size_bytes > BATCH_LIMIT):
                if batch:
                    resp = self.cas.BatchReadBlobs(
                        re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=batch),
                        timeout=RPC_DEADLINE_S,
                    )
                    for r in resp.responses:
                        if r.status.code != code_pb2.OK:
                            raise TaskError(
                                code_pb2.FAILED_PRECONDITION,
                                f"input blob {key(r.digest)} unreadable: code {r.status.code} {r.status.message}",
                            )
                        out[key(r.digest)] = r.data
                batch, size = [], 0
                continue
            batch.append(d)
            size += d.size_bytes
        for d in digests:
            data = out.get(key(d))
            if data is None or digest_of(data).hash != d.hash:
                raise TaskError(code_pb2.FAILED_PRECONDITION, f"input blob {key(d)} missing or corrupt in the CAS")
        return out

    def _read_stream(self, digest):
        parts = []
        try:
            for resp in self.bytestream.Read(
                bytestream_pb2.ReadRequest(resource_name=self._resource(digest)), timeout=RPC_DEADLINE_S
            ):
                parts.append(resp.data)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise TaskError(code_pb2.FAILED_PRECONDITION, f"input blob {key(digest)} not in the CAS") from e
            raise
        return b"".join(parts)

    def cached_file(self, digest, executable):
        """Path of a cached copy of the blob with the wanted mode (one inode per mode)."""
        path = os.path.join(self.cache_dir, f"{digest.hash}_{digest.size_bytes}{'.x' if executable else ''}")
        if os.path.exists(path):
            return path
        return None

    def store(self, digest, data, executable):
        path = os.path.join(self.cache_dir, f"{digest.hash}_{digest.size_bytes}{'.x' if executable else ''}")
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o555 if executable else 0o444)
        os.replace(tmp, path)
        return path

    def upload(self, blobs):
        """blobs: {key: (Digest, bytes or path)}; uploads what the CAS lacks."""
        if not blobs:
            return
        missing = self.cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(instance_name=self.instance, blob_digests=[d for d, _ in blobs.values()]),
            timeout=RPC_DEADLINE_S,
        ).missing_blob_digests
        batch, size = [], 0
        for d in list(missing) + [None]:
            if d is None or (batch and size + d.size_bytes > BATCH_LIMIT):
                if batch:
                    resp = self.cas.BatchUpdateBlobs(
                        re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=batch),
                        timeout=RPC_DEADLINE_S,
                    )
                    for r in resp.responses:
                        if r.status.code != code_pb2.OK:
                            raise TaskError(code_pb2.INTERNAL, f"upload of {key(r.digest)} failed: {r.status.message}")
                batch, size = [], 0
                if d is None:
                    continue
            content = blobs[key(d)][1]
            if d.size_bytes > BATCH_LIMIT:
                self._write_stream(d, content)
                continue
            data = content if isinstance(content, bytes) else open(content, "rb").read()
            batch.append(re_pb2.BatchUpdateBlobsRequest.Request(digest=d, data=data))
            size += d.size_bytes

    def _write_stream(self, digest, content):
        prefix = f"{self.instance}/" if self.instance else ""
        name = f"{prefix}uploads/{uuid.uuid4()}/blobs/{digest.hash}/{digest.size_bytes}"

        def chunks():
            f = open(content, "rb") if not isinstance(content, bytes) else None
            offset = 0
            while True:
                data = f.read(CHUNK) if f else content[offset : offset + CHUNK]
                last = offset + len(data) >= digest.size_bytes
                yield bytestream_pb2.WriteRequest(
                    resource_name=name if offset == 0 else "", write_offset=offset, data=data, finish_write=last
                )
                offset += len(data)
                if last:
                    break
            if f:
                f.close()

        resp = self.bytestream.Write(chunks(), timeout=RPC_DEADLINE_S)
        if resp.committed_size != digest.size_bytes:
            raise TaskError(code_pb2.INTERNAL, f"ByteStream write of {key(digest)} committed {resp.committed_size}")


def safe_join(root, name):
    if not name or name in (".", "..") or "/" in name:
        raise TaskError(code_pb2.INVALID_ARGUMENT, f"bad path component {name!r} in the input root")
    return os.path.join(root, name)


def materialize(cas, root_digest, dest):
    """Builds the input tree under dest; returns the number of files."""
    os.makedirs(dest, exist_ok=True)
    dirs = {}
    level = [root_digest]
    while level:
        blobs = cas.read_blobs(level)
        nxt = []
        for d in level:
            directory = re_pb2.Directory.FromString(blobs[key(d)])
            dirs[key(d)] = directory
            nxt.extend(c.digest for c in directory.directories if key(c.digest) not in dirs)
        level = list({key(d): d for d in nxt}.values())

    files = []  # (path, digest, executable)

    def walk(digest, path):
        directory = dirs[key(digest)]
        for f in directory.files:
            files.append((safe_join(path, f.name), f.digest, f.is_executable))
        for s in directory.symlinks:
            os.symlink(s.target, safe_join(path, s.name))
        for c in directory.directories:
            sub = safe_join(path, c.name)
            os.mkdir(sub)
            walk(c.digest, sub)

    walk(root_digest, dest)
    wanted = [d for _, d, x in files if cas.cached_file(d, x) is None]
    fetched = cas.read_blobs(wanted) if wanted else {}
    for path, d, x in files:
        cached = cas.cached_file(d, x) or cas.store(d, fetched[key(d)], x)
        os.link(cached, path)
    return len(files)


def collect_outputs(cas, command, workdir, result):
    """Fills result's output files/directories from the paths the command names."""
    blobs = {}
    if command.output_paths:
        paths = list(command.output_paths)
    else:
        paths = list(command.output_files) + list(command.output_directories)
    for rel in paths:
        path = os.path.join(workdir, rel)
        if os.path.islink(path):
            result.output_symlinks.add(path=rel, target=os.readlink(path))
        elif os.path.isfile(path):
            d = file_digest(path)
            blobs[key(d)] = (d, path)
            result.output_files.add(path=rel, digest=d, is_executable=os.access(path, os.X_OK))
        elif os.path.isdir(path):
            tree = re_pb2.Tree()
            tree.root.CopyFrom(directory_proto(path, tree, blobs))
            data = tree.SerializeToString()
            d = digest_of(data)
            blobs[key(d)] = (d, data)
            result.output_directories.add(path=rel, tree_digest=d)
        # A declared output the command did not create is simply absent (REAPI).
    return blobs


def directory_proto(path, tree, blobs):
    directory = re_pb2.Directory()
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.islink(p):
            directory.symlinks.add(name=name, target=os.readlink(p))
        elif os.path.isdir(p):
            child = directory_proto(p, tree, blobs)
            tree.children.append(child)
            data = child.SerializeToString()
            directory.directories.add(name=name, digest=digest_of(data))
        elif os.path.isfile(p):
            d = file_digest(p)
            blobs[key(d)] = (d, p)
            directory.files.add(name=name, digest=d, is_executable=os.access(p, os.X_OK))
    return directory


class Bot:
    def __init__(self, args):
        self.args = args
        self.name = args.name
        target = args.url.removeprefix("grpc://")
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]
        self.channel = grpc.insecure_channel(target, options=opts)
        self.bots = bots_pb2_grpc.BotsStub(self.channel)
        self.cas = Cas(self.channel, args.instance, os.path.join(args.workdir, "cache"))
        self.session = None

    def new_session(self):
        worker = worker_pb2.Worker()
        device = worker.devices.add(handle=self.name)
        for prop in self.args.property:
            k, _, v = prop.partition("=")
            device.properties.add(key=k, value=v)
        req = bots_pb2.CreateBotSessionRequest(
            parent=self.args.instance,
            bot_session=bots_pb2.BotSession(bot_id=self.name, status=bots_pb2.OK, worker=worker),
        )
        self.session = self.bots.CreateBotSession(req, timeout=POLL_DEADLINE_S)
        log(self.name, f"session {self.session.name}")

    def update(self, deadline):
        self.session = self.bots.UpdateBotSession(
            bots_pb2.UpdateBotSessionRequest(name=self.session.name, bot_session=self.session), timeout=deadline
        )

    def run_forever(self):
        while True:
            try:
                if self.session is None:
                    self.new_session()
                active = [lease for lease in self.session.leases if lease.state == bots_pb2.LeaseState.ACTIVE]
                if not active:
                    self.update(POLL_DEADLINE_S)
                    continue
                self.work(active[0])
            except grpc.RpcError as e:
                log(self.name, f"engine: {e.code().name}: {e.details()}")
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    self.session = None
                time.sleep(1)

    def work(self, lease):
        scratch = os.path.join(self.args.workdir, "scratch", uuid.uuid4().hex)
        result = re_pb2.ActionResult()
        meta = result.execution_metadata
        meta.worker = self.name
        meta.worker_start_timestamp.CopyFrom(now_ts())
        status_code, message = code_pb2.OK, ""
        try:
            action, action_key = self.action_of(lease)
            log(self.name, f"lease {lease.id}: action {action_key}")
            status_code, message = self.execute(lease, action, action_key, scratch, result)
        except TaskError as e:
            status_code, message = e.code, str(e)
        except LeaseCancelled:
            # Nothing to report: the engine no longer expects a result.
            return
        except grpc.RpcError as e:
            # The engine broke off mid-task: INTERNAL lets it retry elsewhere.
            status_code, message = code_pb2.INTERNAL, f"bot {self.name}: {e.code().name}: {e.details()}"
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        meta.worker_completed_timestamp.CopyFrom(now_ts())
        if status_code != code_pb2.OK:
            log(self.name, f"lease {lease.id}: {message}")
        lease.state = bots_pb2.LeaseState.COMPLETED
        lease.status.code = status_code
        lease.status.message = message
        lease.result.Pack(result)
        self.replace_lease(lease)
        self.update(RPC_DEADLINE_S)

    def replace_lease(self, lease):
        for i, held in enumerate(self.session.leases):
            if held.id == lease.id:
                self.session.leases[i].CopyFrom(lease)

    def action_of(self, lease):
        # BuildGrid 0.9.1 packs the Action itself into the lease payload
        # (a bare Digest only for jobs stored without their Action).
        if lease.payload.Is(re_pb2.Action.DESCRIPTOR):
            action = re_pb2.Action()
            lease.payload.Unpack(action)
            return action, key(digest_of(action.SerializeToString()))
        if lease.payload.Is(re_pb2.Digest.DESCRIPTOR):
            d = re_pb2.Digest()
            lease.payload.Unpack(d)
            return re_pb2.Action.FromString(self.cas.read_blobs([d])[key(d)]), key(d)
        raise TaskError(code_pb2.INVALID_ARGUMENT, f"lease payload of type {lease.payload.type_url} is no Action")

    def execute(self, lease, action, action_key, scratch, result):
        meta = result.execution_metadata
        meta.input_fetch_start_timestamp.CopyFrom(now_ts())
        command = re_pb2.Command.FromString(self.cas.read_blobs([action.command_digest])[key(action.command_digest)])
        root = os.path.join(scratch, "root")
        materialize(self.cas, action.input_root_digest, root)
        meta.input_fetch_completed_timestamp.CopyFrom(now_ts())
        if not command.arguments:
            raise TaskError(code_pb2.INVALID_ARGUMENT, "Command has no arguments")
        workdir = os.path.normpath(os.path.join(root, command.working_directory))
        if not (workdir + "/").startswith(root + "/") or not os.path.isdir(workdir):
            raise TaskError(code_pb2.INVALID_ARGUMENT, f"working_directory {command.working_directory!r} not in the input root")
        for rel in list(command.output_paths) + list(command.output_files) + list(command.output_directories):
            os.makedirs(os.path.dirname(os.path.join(workdir, rel)), exist_ok=True)
        env = {v.name: v.value for v in command.environment_variables}
        timeout = action.timeout.ToTimedelta().total_seconds() if action.HasField("timeout") else None

        meta.execution_start_timestamp.CopyFrom(now_ts())
        with open(os.path.join(scratch, "stdout"), "wb") as out, open(os.path.join(scratch, "stderr"), "wb") as err:
            # The command stays in the bot's process group, so killing the
            # group (cluster.kill_bot) takes both down, as a lost machine
            # would. No preexec_fn: Python code between fork and exec in a
            # process with gRPC threads can abort the child.
            try:
                proc = subprocess.Popen(
                    list(command.arguments), cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=err,
                )
            except OSError as e:
                raise TaskError(code_pb2.INVALID_ARGUMENT, f"cannot run {command.arguments[0]!r}: {e.strerror}") from e
            status_code, message = self.wait(lease, proc, timeout)
        meta.execution_completed_timestamp.CopyFrom(now_ts())
        result.exit_code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        with open(self.args.log, "a") as f:
            f.write(f"{action_key} {self.name} {result.exit_code}\n")

        meta.output_upload_start_timestamp.CopyFrom(now_ts())
        blobs = collect_outputs(self.cas, command, workdir, result)
        for stream in ("stdout", "stderr"):
            d = file_digest(os.path.join(scratch, stream))
            blobs[key(d)] = (d, os.path.join(scratch, stream))
            getattr(result, f"{stream}_digest").CopyFrom(d)
        self.cas.upload(blobs)
        meta.output_upload_completed_timestamp.CopyFrom(now_ts())
        return status_code, message

    def wait(self, lease, proc, timeout):
        """Waits for the command, keeping the lease alive; kills it on timeout or cancel."""
        start = time.monotonic()
        while True:
            try:
                proc.wait(timeout=self.args.heartbeat)
                return code_pb2.OK, ""
            except subprocess.TimeoutExpired:
                pass
            if timeout is not None and time.monotonic() - start > timeout:
                proc.kill()
                proc.wait()
                return code_pb2.DEADLINE_EXCEEDED, f"action timed out after {timeout:g} s on bot {self.name}"
            try:
                self.update(RPC_DEADLINE_S)
            except grpc.RpcError as e:
                log(self.name, f"keepalive: {e.code().name}: {e.details()}")
                continue
            held = [x for x in self.session.leases if x.id == lease.id]
            if not held or held[0].state == bots_pb2.LeaseState.CANCELLED:
                proc.kill()
                proc.wait()
                log(self.name, f"lease {lease.id} cancelled by the engine")
                raise LeaseCancelled(lease.id)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="grpc://HOST:PORT of the engine")
    p.add_argument("--name", required=True, help="bot id, unique in the farm")
    p.add_argument("--workdir", required=True, help="scratch and blob-cache directory")
    p.add_argument("--log", required=True, help="file to append one line per executed action to")
    p.add_argument("--instance", default="", help="REAPI instance name")
    p.add_argument("--property", action="append", default=[], help="worker platform property KEY=VALUE")
    p.add_argument("--heartbeat", type=float, default=2.0, help="seconds between keepalives while running")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Bot(args).run_forever()


if __name__ == "__main__":
    main()
