"""flowc's Python client: compile models with the flowcd daemon and run the
artifacts in this process.

    import flowc
    artifact = flowc.compile("model.onnx")      # or an onnx.ModelProto, or a
    outputs = artifact.run(x=x)                 # torch.nn.Module + example_inputs

In IPython, `%load_ext flowc` then `%flowc_watch model.onnx` recompiles on
save. docs/python.md in the flowc checkout describes it all."""
from ._compile import compile, default_connection
from ._daemon import Connection
from .artifact import Artifact, load
from .errors import (Cancelled, DataLoss, FailedPrecondition, FlowcError, Internal,
                     InvalidArgument, InvalidModel, NotFound, PermissionDenied,
                     ResourceExhausted, Timeout, Unavailable, Unsupported)

__version__ = "0.10.0"

__all__ = ["compile", "load", "Artifact", "Connection", "default_connection", "FlowcError",
           "InvalidModel", "InvalidArgument", "NotFound", "DataLoss", "Unsupported",
           "Unavailable", "ResourceExhausted", "FailedPrecondition", "Cancelled", "Timeout",
           "PermissionDenied", "Internal", "load_ipython_extension",
           "unload_ipython_extension"]


def load_ipython_extension(ipython):
    """`%load_ext flowc`: registers %flowc_watch and %flowc_unwatch."""
    from .magic import register

    register(ipython)


def unload_ipython_extension(ipython):
    from .magic import unregister

    unregister(ipython)
