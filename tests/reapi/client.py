"""A small REAPI client for the tests of tests/reapi/: runs one Action on an
engine and prints what happened as JSON. Runs under .venv-reapi (BuildGrid's
generated protos), since the e2e venv has no grpc.

  .venv-reapi/bin/python tests/reapi/client.py --url grpc://127.0.0.1:PORT \
      [--instance main] [--input NAME=FILE ...] [--output PATH ...] \
      [--timeout S] [--skip-cache] [--resume] -- ARGV...

--resume drops the Execute stream after its first message and follows the
operation with WaitExecution, as a client that lost its stream does.
"""

import argparse
import hashlib
import json
import sys
import uuid

import grpc

from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2, bytestream_pb2_grpc

BATCH_LIMIT = 3 * 1024 * 1024
CHUNK = 1024 * 1024


def digest_of(data):
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


class Client:
    def __init__(self, url, instance):
        opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        self.channel = grpc.insecure_channel(url.removeprefix("grpc://"), options=opts)
        self.instance = instance
        self.cas = re_grpc.ContentAddressableStorageStub(self.channel)
        self.bytestream = bytestream_pb2_grpc.ByteStreamStub(self.channel)
        self.execution = re_grpc.ExecutionStub(self.channel)
        self.action_cache = re_grpc.ActionCacheStub(self.channel)
        self.blobs = {}

    def add(self, data):
        d = digest_of(data)
        self.blobs[d.hash] = (d, data)
        return d

    def upload(self):
        digests = [d for d, _ in self.blobs.values()]
        missing = self.cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(instance_name=self.instance, blob_digests=digests), timeout=60
        ).missing_blob_digests
        small = [re_pb2.BatchUpdateBlobsRequest.Request(digest=d, data=self.blobs[d.hash][1])
                 for d in missing if d.size_bytes <= BATCH_LIMIT]
        if small:
            resp = self.cas.BatchUpdateBlobs(
                re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=small), timeout=60
            )
            bad = [r for r in resp.responses if r.status.code != 0]
            if bad:
                raise SystemExit(f"BatchUpdateBlobs failed: {bad}")
        for d in missing:
            if d.size_bytes > BATCH_LIMIT:
                self.write_stream(d, self.blobs[d.hash][1])

    def write_stream(self, d, data):
        prefix = f"{self.instance}/" if self.instance else ""
        name = f"{prefix}uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
        reqs = (
            bytestream_pb2.WriteRequest(resource_name=name if off == 0 else "", write_offset=off,
                                        data=data[off:off + CHUNK], finish_write=off + CHUNK >= len(data))
            for off in range(0, len(data), CHUNK)
        )
        self.bytestream.Write(reqs, timeout=120)

    def read(self, d):
        if d.size_bytes == 0:
            return b""
        resp = self.cas.BatchReadBlobs(re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=[d]),
                                       timeout=60)
        return resp.responses[0].data


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--instance", default="")
    p.add_argument("--input", action="append", default=[], help="NAME=FILE placed in the input root")
    p.add_argument("--output", action="append", default=[], help="output file path")
    p.add_argument("--timeout", type=float)
    p.add_argument("--skip-cache", action="store_true")
    p.add_argument("--resume", action="store_true")
    p.add_argument("argv", nargs="+")
    args = p.parse_args()

    c = Client(args.url, args.instance)
    root = re_pb2.Directory()
    for spec in sorted(args.input):
        name, _, path = spec.partition("=")
        data = open(path, "rb").read()
        root.files.add(name=name, digest=c.add(data), is_executable=True)
    command = re_pb2.Command(arguments=args.argv, output_paths=sorted(args.output))
    command.environment_variables.add(name="PATH", value="/usr/bin:/bin")
    action = re_pb2.Action(command_digest=c.add(command.SerializeToString()),
                           input_root_digest=c.add(root.SerializeToString()))
    if args.timeout:
        action.timeout.FromNanoseconds(int(args.timeout * 1e9))
    action_digest = c.add(action.SerializeToString())
    c.upload()

    report = {"action": f"{action_digest.hash}/{action_digest.size_bytes}", "messages": []}
    request = re_pb2.ExecuteRequest(instance_name=args.instance, action_digest=action_digest,
                                    skip_cache_lookup=args.skip_cache)
    op = None
    stream = c.execution.Execute(request, timeout=300)
    for op in stream:
        meta = re_pb2.ExecuteOperationMetadata()
        op.metadata.Unpack(meta)
        report["messages"].append({
            "rpc": "Execute", "name": op.name, "done": op.done, "stage": re_pb2.ExecutionStage.Value.Name(meta.stage),
            "metadata_digest": f"{meta.action_digest.hash}/{meta.action_digest.size_bytes}",
        })
        if args.resume and not op.done:
            stream.cancel()
            break
    if args.resume and op is not None and not op.done:
        for op in c.execution.WaitExecution(re_pb2.WaitExecutionRequest(name=op.name), timeout=300):
            meta = re_pb2.ExecuteOperationMetadata()
            op.metadata.Unpack(meta)
            report["messages"].append({"rpc": "WaitExecution", "name": op.name, "done": op.done,
                                       "stage": re_pb2.ExecutionStage.Value.Name(meta.stage)})
    if op is None or not op.done:
        raise SystemExit(f"operation stream ended before completion: {report}")
    if op.HasField("error"):
        report["error"] = {"code": op.error.code, "message": op.error.message}
        print(json.dumps(report))
        return
    response = re_pb2.ExecuteResponse()
    op.response.Unpack(response)
    result = response.result
    report.update({
        "status": {"code": response.status.code, "message": response.status.message},
        "cached_result": response.cached_result,
        "exit_code": result.exit_code,
        "worker": result.execution_metadata.worker,
        "outputs": {f.path: c.read(f.digest).decode(errors="replace") for f in result.output_files},
        "stdout": (result.stdout_raw or c.read(result.stdout_digest)).decode(errors="replace"),
        "stderr": (result.stderr_raw or c.read(result.stderr_digest)).decode(errors="replace"),
    })
    try:
        cached = c.action_cache.GetActionResult(
            re_pb2.GetActionResultRequest(instance_name=args.instance, action_digest=action_digest), timeout=30)
        report["action_cache_exit_code"] = cached.exit_code
    except grpc.RpcError as e:
        report["action_cache_exit_code"] = None if e.code() == grpc.StatusCode.NOT_FOUND else e.code().name
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
