"""Generates the protocol's modules (flowc/v1/flowc_pb2.py and
flowc_pb2_grpc.py) from proto/flowc/v1/flowc.proto while the package is
built: the protocol is never written by hand, and never goes stale.

pip builds a local directory in place, so the proto is found at ../proto;
FLOWC_PROTO_DIR names another proto root."""
import os
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = pathlib.Path(os.environ.get("FLOWC_PROTO_DIR", HERE.parent / "proto"))
PROTO = "flowc/v1/flowc.proto"


class BuildWithProtocol(build_py):
    def run(self):
        super().run()
        source = PROTO_ROOT / PROTO
        if not source.is_file():
            raise SystemExit(f"flowc: cannot generate the protocol: {source} does not exist "
                             "(build from a flowc checkout, or set FLOWC_PROTO_DIR)")
        from grpc_tools import protoc
        import grpc_tools

        out = pathlib.Path(self.build_lib)
        (out / "flowc" / "v1").mkdir(parents=True, exist_ok=True)
        well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
        code = protoc.main(["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}",
                            f"--python_out={out}", f"--grpc_python_out={out}", str(source)])
        if code != 0:
            raise SystemExit(f"flowc: grpc_tools.protoc failed on {source} ({code})")


setup(cmdclass={"build_py": BuildWithProtocol})
