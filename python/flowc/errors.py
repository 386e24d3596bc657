"""flowc's errors as Python exceptions: one class per kind of failure, each
carrying the fields of the CLI's JSON errors (code, kind, message, file,
node, op, digest)."""
import re

import grpc

# flowc::StatusCode numbers and their kinds (flowc/support/Status.h,
# flowc/support/ErrorFields.h).
KINDS = {
    0: "ok", 1: "invalid_argument", 2: "not_found", 3: "already_exists", 4: "data_loss",
    5: "unavailable", 6: "resource_exhausted", 7: "failed_precondition",
    8: "unimplemented", 9: "internal", 10: "cancelled", 11: "unauthenticated",
    12: "permission_denied",
}
CODES = {kind: code for code, kind in KINDS.items()}


class FlowcError(Exception):
    """A flowc failure. `code` is flowc's status code (a number), `kind` its
    name ("invalid_argument"); `file`, `node`, `op` and `digest` are set
    where the message names them ("" otherwise)."""

    def __init__(self, message, *, kind="internal", code=None, file="", node="", op="",
                 digest="", job_id=""):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.code = CODES.get(kind, 9) if code is None else code
        self.file = file
        self.node = node
        self.op = op
        self.digest = digest
        self.job_id = job_id

    def to_dict(self):
        """The fields as `flowc submit --json` prints an error."""
        return {"kind": self.kind, "code": self.code, "message": self.message,
                "file": self.file, "node": self.node, "op": self.op,
                "digest": self.digest}


class InvalidModel(FlowcError):
    """The model or a request's option is malformed (invalid_argument)."""


InvalidArgument = InvalidModel


class NotFound(FlowcError):
    """A model file, artifact or weight that does not exist (not_found)."""


class DataLoss(FlowcError):
    """Damaged bytes: a truncated model or artifact, a corrupt cache file."""


class Unsupported(FlowcError):
    """An op, dtype or option flowc does not implement (unimplemented)."""


class Unavailable(FlowcError):
    """No daemon answers, or code that cannot load on this host."""


class ResourceExhausted(FlowcError):
    """Out of memory or disk, or over a limit."""


class FailedPrecondition(FlowcError):
    """The state does not allow it: another artifact format, a thin
    artifact's weights not at hand."""


class Cancelled(FlowcError):
    """The job was cancelled (`flowc cancel`, a newer save superseded it)."""


class Timeout(FlowcError):
    """The job ran past its timeout."""


class PermissionDenied(FlowcError):
    """Credentials or ownership do not allow it (a socket of another user)."""


class Internal(FlowcError):
    """A bug in flowc: please report it with the message."""


_CLASSES = {
    "invalid_argument": InvalidModel, "not_found": NotFound, "data_loss": DataLoss,
    "unimplemented": Unsupported, "unavailable": Unavailable,
    "resource_exhausted": ResourceExhausted, "failed_precondition": FailedPrecondition,
    "cancelled": Cancelled, "deadline_exceeded": Timeout,
    "permission_denied": PermissionDenied, "unauthenticated": PermissionDenied,
    "internal": Internal,
}


def error(kind, message, **fields):
    """The exception for `kind` ("invalid_argument", ...)."""
    return _CLASSES.get(kind, FlowcError)(message, kind=kind, **fields)


def from_status(code, message):
    """The exception for a C API status `code` and its message."""
    return error(KINDS.get(code, "internal"), message, code=code)


# The message convention of flowc's errors ("FILE: node 'NAME' (OP): what"),
# read only when a daemon sends no ErrorDetail.
_NODE = re.compile(r"node '([^']*)' \(([^)]*)\)")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}(?:/[0-9]+)?")
_LEADING_PATH = re.compile(r"^(?:[a-z ]+ )?('?)(/[^:']+)\1: ")


def _fields_of_message(message):
    fields = {}
    if match := _NODE.search(message):
        fields["node"], fields["op"] = match.group(1), match.group(2)
    if match := _DIGEST.search(message):
        fields["digest"] = match.group(0)
    if match := _LEADING_PATH.search(message):
        fields["file"] = match.group(2)
    return fields


def from_rpc(rpc_error, job_id=""):
    """The exception for a failed RPC: the daemon's ErrorDetail (sent in the
    trailer grpc-status-details-bin) where it sent one, else the gRPC status
    code and message."""
    from .v1 import flowc_pb2

    code = rpc_error.code() if hasattr(rpc_error, "code") else None
    message = (rpc_error.details() if hasattr(rpc_error, "details") else None) or str(rpc_error)
    trailers = rpc_error.trailing_metadata() if hasattr(rpc_error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key != "grpc-status-details-bin":
            continue
        detail = flowc_pb2.ErrorDetail()
        try:
            detail.ParseFromString(value)
        except Exception:  # Not an ErrorDetail (another server's details).
            break
        if not detail.kind:
            break
        return error(detail.kind, detail.message or message, code=detail.code,
                     file=detail.file, node=detail.node, op=detail.op,
                     digest=detail.digest, job_id=job_id)
    kind = code.name.lower() if isinstance(code, grpc.StatusCode) else "internal"
    if code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in message.lower():
        message = f"the daemon does not answer: {message}"
    return error(kind, message, job_id=job_id, **_fields_of_message(message))
