// The checks every compile-service request passes before any work: the
// daemon runs them on what a client sent, the worker process again on what
// the daemon handed it. Pure functions of the message: no file is read.
#pragma once

#include "flowc/support/Status.h"
#include "flowc/v1/flowc.pb.h"
#include "flowc/worker/CompileExecutor.h"

namespace flowc::worker {

/// A SubmitRequest as a compile request; InvalidArgument naming the field.
Expected<CompileRequest> validateSubmitRequest(const flowc::v1::SubmitRequest &request);

/// An InspectRequest's model path and shapes; InvalidArgument naming the field.
Expected<compiler::InputShapes>
validateInspectRequest(const flowc::v1::InspectRequest &request);

/// A ReproRequest's compile options and shapes.
struct ReproParameters {
  compiler::CompileOptions options;
  compiler::InputShapes inputShapes;
};
Expected<ReproParameters> validateReproRequest(const flowc::v1::ReproRequest &request);

} // namespace flowc::worker
