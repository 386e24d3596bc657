"""The daemon protocol (flowc.v1), generated from proto/flowc/v1/flowc.proto
when the package is built: flowc_pb2 (messages) and flowc_pb2_grpc (stubs)."""
