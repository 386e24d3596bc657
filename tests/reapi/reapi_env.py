"""Where the REAPI tests find their tools: the Python with BuildGrid
(.venv-reapi at the checkout's root, or $FLOWC_REAPI_PYTHON) and protoc."""

import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto" / "reapi"


def reapi_python():
    """The interpreter that has BuildGrid installed; fails the test, naming
    what to set up, when there is none."""
    path = os.environ.get("FLOWC_REAPI_PYTHON") or str(ROOT / ".venv-reapi" / "bin" / "python")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no BuildGrid Python at {path}: create .venv-reapi (Python >= 3.13, "
                    f"pip install buildgrid==0.9.1) or set FLOWC_REAPI_PYTHON")
    return path


def protoc():
    path = shutil.which("protoc")
    if path is None:
        pytest.fail("protoc not found (Debian's protobuf-compiler)")
    return path


def proto_files(root=PROTO_ROOT):
    """flowc's REAPI .proto files, relative to `root`."""
    return sorted(str(p.relative_to(root)) for p in pathlib.Path(root).rglob("*.proto"))
