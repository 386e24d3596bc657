"""flowc's REAPI subset (proto/reapi) against the published REAPI as BuildGrid
ships it: same packages, message names, field numbers and types, methods.
The comparison runs in .venv-reapi (BuildGrid's descriptors); protoc is
Debian's.

  /work/main/.venv/bin/python -m pytest -q tests/reapi/test_proto_subset.py
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import reapi_venv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto" / "reapi"
CHECKER = ROOT / "tests" / "reapi" / "proto_subset_check.py"


def descriptor_set(proto_root, out):
    """Compiles every .proto under `proto_root` into one FileDescriptorSet."""
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.fail("protoc not found (Debian's protobuf-compiler)")
    protos = sorted(str(p.relative_to(proto_root)) for p in Path(proto_root).rglob("*.proto"))
    subprocess.run([protoc, f"--proto_path={proto_root}", "--include_imports",
                    f"--descriptor_set_out={out}", *protos], check=True, capture_output=True,
                   text=True)
    return out


def run_checker(path):
    return subprocess.run([reapi_venv() / "bin" / "python", str(CHECKER), str(path)],
                          capture_output=True, text=True, timeout=120)


def test_subset_matches_buildgrid(tmp_path):
    # Every message, field, enum value and method of ours exists identically.
    result = run_checker(descriptor_set(PROTO_ROOT, tmp_path / "reapi.pb"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_checker_reports_a_wrong_field_number(tmp_path):
    # A copy of ours with Digest.size_bytes renumbered must be refused, by name.
    copy = tmp_path / "reapi"
    shutil.copytree(PROTO_ROOT, copy)
    proto = copy / "build" / "bazel" / "remote" / "execution" / "v2" / "remote_execution.proto"
    text = proto.read_text()
    assert "int64 size_bytes = 2;" in text
    proto.write_text(text.replace("int64 size_bytes = 2;", "int64 size_bytes = 3;"))
    result = run_checker(descriptor_set(copy, tmp_path / "bad.pb"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "field build.bazel.remote.execution.v2.Digest.size_bytes: ours (3," in result.stdout


def test_checker_reports_a_method_the_reference_lacks(tmp_path):
    # A method BuildGrid does not serve must be refused, by name.
    copy = tmp_path / "reapi"
    shutil.copytree(PROTO_ROOT, copy)
    proto = copy / "google" / "bytestream" / "bytestream.proto"
    text = proto.read_text()
    proto.write_text(text.replace(
        "rpc Read(ReadRequest) returns (stream ReadResponse);",
        "rpc Read(ReadRequest) returns (stream ReadResponse);\n"
        "  rpc Peek(ReadRequest) returns (ReadResponse);"))
    result = run_checker(descriptor_set(copy, tmp_path / "bad.pb"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "method google.bytestream.ByteStream.Peek: not in the reference" in result.stdout
