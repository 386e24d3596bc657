#include "flowc/worker/RequestValidation.h"

#include "flowc/rpc/Vocabulary.h"

namespace flowc::worker {

namespace {

/// Longest model path accepted: PATH_MAX, the kernel's own limit.
constexpr size_t kMaxPathBytes = 4096;
/// More input shapes or passes than any model has is a malformed request.
constexpr int kMaxRepeated = 4096;
constexpr int kMaxRank = 64;

Status requireModelPath(const std::string &path) {
  if (path.empty() || path[0] != '/')
    return invalidArgument("model_path must be an absolute path, got '" + path + "'");
  if (path.size() > kMaxPathBytes)
    return invalidArgument("model_path is " + std::to_string(path.size()) +
                           " bytes, longer than the " + std::to_string(kMaxPathBytes) +
                           "-byte limit");
  if (path.find('\0') != std::string::npos)
    return invalidArgument("model_path contains a NUL byte");
  return Status::ok();
}

/// Whether a request may ask for the debugging options (Submit) or not
/// (Repro, whose reproducer records target, level and precision only).
enum class DebugOptions { Allowed, Refused };

/// The one conversion from the wire's CompileOptions: unset enums are the
/// defaults (cpu, fp32). InvalidArgument naming the field
/// ("options.precision").
Expected<compiler::CompileOptions> compileOptions(const flowc::v1::CompileOptions &wire,
                                                  DebugOptions debug) {
  compiler::CompileOptions options;
  FLOWC_ASSIGN_OR_RETURN(options.target,
                         rpc::targetFromProto(wire.target(), "options.target"));
  FLOWC_ASSIGN_OR_RETURN(options.precision,
                         rpc::precisionFromProto(wire.precision(), "options.precision"));
  options.optLevel = wire.opt_level();
  if (debug == DebugOptions::Refused &&
      (wire.disabled_passes_size() > 0 || !wire.print_ir_after().empty()))
    return invalidArgument("options.disabled_passes and options.print_ir_after apply to "
                           "Submit only; a reproducer does not record them");
  if (wire.disabled_passes_size() > kMaxRepeated)
    return invalidArgument(
        "options.disabled_passes: " + std::to_string(wire.disabled_passes_size()) +
        " disabled passes, more than " + std::to_string(kMaxRepeated));
  options.disabledPasses.assign(wire.disabled_passes().begin(),
                                wire.disabled_passes().end());
  options.printIrAfter = wire.print_ir_after();
  FLOWC_RETURN_IF_ERROR(options.validate());
  return options;
}

/// The request's input shapes; InvalidArgument on a repeated name or a
/// negative or absurd dimension.
Expected<compiler::InputShapes>
inputShapesOf(const google::protobuf::RepeatedPtrField<flowc::v1::InputShape> &fields) {
  if (fields.size() > kMaxRepeated)
    return invalidArgument(std::to_string(fields.size()) + " input shapes, more than " +
                           std::to_string(kMaxRepeated));
  compiler::InputShapes shapes;
  for (const flowc::v1::InputShape &field : fields) {
    if (field.name().empty())
      return invalidArgument("an input shape without an input name");
    if (field.dims_size() > kMaxRank)
      return invalidArgument("input '" + field.name() + "' is given " +
                             std::to_string(field.dims_size()) +
                             " dimensions, more than " + std::to_string(kMaxRank));
    for (int64_t dim : field.dims())
      if (dim < 0)
        return invalidArgument("input '" + field.name() + "' is given dimension " +
                               std::to_string(dim) + "; dimensions are >= 0");
    if (!shapes
             .emplace(field.name(),
                      std::vector<int64_t>(field.dims().begin(), field.dims().end()))
             .second)
      return invalidArgument("input '" + field.name() + "' is given two shapes");
  }
  return shapes;
}

} // namespace

Expected<CompileRequest> validateSubmitRequest(const flowc::v1::SubmitRequest &request) {
  CompileRequest compile;
  FLOWC_RETURN_IF_ERROR(requireModelPath(request.model_path()));
  compile.modelPath = request.model_path();
  compile.explain = request.explain();
  FLOWC_ASSIGN_OR_RETURN(compile.inputShapes, inputShapesOf(request.input_shapes()));
  FLOWC_ASSIGN_OR_RETURN(compile.options,
                         compileOptions(request.options(), DebugOptions::Allowed));
  compile.kind = request.thin() ? ArtifactKind::Thin : ArtifactKind::Packed;
  FLOWC_ASSIGN_OR_RETURN(compile.search, rpc::searchBudgetFromProto(
                                             request.search_budget(), "search_budget"));
  return compile;
}

Expected<compiler::InputShapes>
validateInspectRequest(const flowc::v1::InspectRequest &request) {
  FLOWC_RETURN_IF_ERROR(requireModelPath(request.model_path()));
  return inputShapesOf(request.input_shapes());
}

Expected<ReproParameters> validateReproRequest(const flowc::v1::ReproRequest &request) {
  FLOWC_RETURN_IF_ERROR(requireModelPath(request.model_path()));
  ReproParameters parameters;
  FLOWC_ASSIGN_OR_RETURN(parameters.options,
                         compileOptions(request.options(), DebugOptions::Refused));
  FLOWC_ASSIGN_OR_RETURN(parameters.inputShapes, inputShapesOf(request.input_shapes()));
  return parameters;
}

} // namespace flowc::worker
