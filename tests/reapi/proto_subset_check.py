"""Checks that flowc's REAPI subset (proto/reapi) is wire-compatible with the
published REAPI, as BuildGrid ships it: every message, field (number, type,
label, message/enum type, oneof), enum value, service and method of ours
must exist identically in BuildGrid's descriptors. Runs under a Python with
BuildGrid installed (.venv-reapi); reads a FileDescriptorSet written by
`protoc --include_imports --descriptor_set_out`.

Usage: proto_subset_check.py DESCRIPTOR_SET   (exit 0: compatible; 1: each
mismatch on a line of stdout)
"""

import sys

from google.protobuf import descriptor_pb2, descriptor_pool

# Importing BuildGrid's generated modules registers their descriptors.
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2  # noqa: F401
from buildgrid._protos.google.bytestream import bytestream_pb2  # noqa: F401
from buildgrid._protos.google.longrunning import operations_pb2  # noqa: F401
from buildgrid._protos.google.rpc import status_pb2  # noqa: F401

OURS = ("build.bazel.remote.execution.v2", "google.bytestream", "google.longrunning",
        "google.rpc")


def field_shape(field):
    """What decides a field's wire form and meaning, comparable across pools."""
    type_name = ""
    if field.message_type is not None:
        type_name = field.message_type.full_name
    elif field.enum_type is not None:
        type_name = field.enum_type.full_name
    oneof = field.containing_oneof.name if field.containing_oneof is not None else ""
    return (field.number, field.type, field.is_repeated, type_name, oneof)


def compare_enum(ours, theirs, problems):
    """Each of our values must have the reference's number."""
    values = {v.name: v.number for v in theirs.values}
    for value in ours.values:
        if values.get(value.name) != value.number:
            problems.append(f"enum {ours.full_name}.{value.name} = {value.number}: "
                            f"reference has {values.get(value.name)}")


def compare_message(ours, reference, problems):
    try:
        theirs = reference.FindMessageTypeByName(ours.full_name)
    except KeyError:
        problems.append(f"message {ours.full_name}: not in the reference")
        return
    for field in ours.fields:
        other = theirs.fields_by_name.get(field.name)
        if other is None:
            problems.append(f"field {field.full_name}: not in the reference")
            continue
        if field_shape(field) != field_shape(other):
            problems.append(f"field {field.full_name}: ours {field_shape(field)}, "
                            f"reference {field_shape(other)}")
    for nested in ours.nested_types:
        compare_message(nested, reference, problems)
    for enum in ours.enum_types:
        other = theirs.enum_types_by_name.get(enum.name)
        if other is None:
            problems.append(f"enum {enum.full_name}: not in the reference")
            continue
        compare_enum(enum, other, problems)


def compare_service(ours, reference, problems):
    try:
        theirs = reference.FindServiceByName(ours.full_name)
    except KeyError:
        problems.append(f"service {ours.full_name}: not in the reference")
        return
    def shape(m):
        return (m.input_type.full_name, m.output_type.full_name, m.client_streaming,
                m.server_streaming)

    for method in ours.methods:
        other = theirs.methods_by_name.get(method.name)
        if other is None:
            problems.append(f"method {method.full_name}: not in the reference")
        elif shape(method) != shape(other):
            problems.append(f"method {method.full_name}: ours {shape(method)}, "
                            f"reference {shape(other)}")


def check(descriptor_set_path):
    """The mismatches between our subset and the reference, one string each."""
    with open(descriptor_set_path, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    ours = descriptor_pool.DescriptorPool()
    for file in files.file:
        ours.Add(file)
    reference = descriptor_pool.Default()
    problems = []
    checked = 0
    for file in files.file:
        if file.package not in OURS:
            continue  # protobuf's well-known types, shared by both
        parsed = ours.FindFileByName(file.name)
        for message in parsed.message_types_by_name.values():
            compare_message(message, reference, problems)
            checked += 1
        for service in parsed.services_by_name.values():
            compare_service(service, reference, problems)
            checked += 1
    if checked == 0:
        problems.append(f"{descriptor_set_path}: no REAPI message or service to check")
    return problems


if __name__ == "__main__":
    found = check(sys.argv[1])
    for problem in found:
        print(problem)
    sys.exit(1 if found else 0)
