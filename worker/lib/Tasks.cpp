#include "flowc/worker/Tasks.h"

#include "flowc/compiler/PassObserver.h"
#include "flowc/runtime/Tuning.h"
#include "flowc/worker/Search.h"
#include "flowc/support/MachineLock.h"
#include "flowc/support/Concurrently.h"
#include "flowc/support/MappedFile.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc::worker {

namespace {

using cache::Digest;
using nlohmann::json;

constexpr const char *kTaskFormat = "flowc.task.v1";
constexpr const char *kPlanFormat = "flowc.plan.v1";
constexpr const char *kGraphFile = "graph.mlirbc";
constexpr const char *kKernelFile = "kernel.mlir";
constexpr const char *kPlanFile = "plan.json";
constexpr const char *kGraphObjectFile = "graph.o";
constexpr const char *kKernelObjectFile = "kernel.o";
constexpr const char *kMeasureFile = "measure.json";

/// Version 2 added the library kernels' constant weights, version 3 the
/// library sites and what search chose; an older list is unreadable, so its
/// code is compiled again.
constexpr const char *kCodeWeightsFormat = "flowc.code-weights.v3";

json codeWeightsJson(const compiler::CodeWeights &weights) {
  json derived = json::array();
  for (const compiler::DerivedWeight &weight : weights.derived)
    derived.push_back({{"key", weight.key},
                       {"recipe", weight.recipe},
                       {"inputs", weight.inputs},
                       {"shape", weight.info.shape}});
  json kernelWeights = json::array();
  for (const compiler::KernelWeight &weight : weights.kernelWeights)
    kernelWeights.push_back({{"site", weight.site},
                             {"buffer", weight.buffer},
                             {"key", weight.key},
                             {"kind", weight.kind},
                             {"params", weight.params}});
  json sites = json::array();
  for (const compiler::LibrarySite &site : weights.librarySites)
    sites.push_back({{"site", site.site},
                     {"kind", site.kind},
                     {"params", site.params},
                     {"nodes", site.nodes}});
  json loopKernels = json::array();
  for (const compiler::LoopKernelSource &kernel : weights.loopKernels)
    loopKernels.push_back({{"symbol", kernel.symbol},
                           {"call_sites", kernel.callSites},
                           {"nodes", kernel.nodes}});
  return {{"format", kCodeWeightsFormat}, {"keys", weights.keys},
          {"derived", derived},           {"kernel_weights", kernelWeights},
          {"library_sites", sites},       {"loop_kernels", loopKernels}};
}

/// A kernel's source nodes; optional, as lists written before the model
/// page had none.
std::vector<int32_t> sourceNodesFrom(const json &entry) {
  auto nodes = entry.find("nodes");
  return nodes == entry.end() ? std::vector<int32_t>()
                              : nodes->get<std::vector<int32_t>>();
}

std::optional<compiler::CodeWeights> codeWeightsFrom(const json &parsed) {
  if (!parsed.is_object() || parsed.value("format", "") != kCodeWeightsFormat)
    return std::nullopt;
  try {
    compiler::CodeWeights weights;
    weights.keys = parsed.at("keys").get<std::vector<std::string>>();
    for (const json &entry : parsed.at("derived")) {
      compiler::DerivedWeight weight;
      weight.key = entry.at("key").get<std::string>();
      weight.recipe = entry.at("recipe").get<std::string>();
      weight.inputs = entry.at("inputs").get<std::vector<std::string>>();
      weight.info = {weight.key, compiler::DType::F32,
                     entry.at("shape").get<std::vector<int64_t>>()};
      weights.derived.push_back(std::move(weight));
    }
    for (const json &entry : parsed.at("kernel_weights"))
      weights.kernelWeights.push_back(compiler::KernelWeight{
          entry.at("site").get<int64_t>(), entry.at("buffer").get<int64_t>(),
          entry.at("key").get<std::string>(), entry.at("kind").get<int64_t>(),
          entry.at("params").get<std::vector<int64_t>>()});
    for (const json &entry : parsed.at("library_sites"))
      weights.librarySites.push_back(compiler::LibrarySite{
          entry.at("site").get<int64_t>(), entry.at("kind").get<int64_t>(),
          entry.at("params").get<std::vector<int64_t>>(), sourceNodesFrom(entry)});
    for (const json &entry : parsed.value("loop_kernels", json::array()))
      weights.loopKernels.push_back(compiler::LoopKernelSource{
          entry.at("symbol").get<std::string>(), entry.at("call_sites").get<int>(),
          sourceNodesFrom(entry)});
    return weights;
  } catch (const json::exception &) {
    return std::nullopt;
  }
}

json optionsJson(const compiler::CompileOptions &options) {
  return {{"target", targetName(options.target)},
          {"opt", options.optLevel},
          {"precision", precisionName(options.precision)},
          {"disabled_passes", options.disabledPasses}};
}

json targetJson(const compiler::CodeTarget &target) {
  return {{"triple", target.triple}, {"cpu", target.cpu}, {"features", target.features}};
}

/// Stores task.json and returns it as the task's first input.
Expected<TaskInput> storeTaskFile(cache::Cache &cache, const json &task) {
  FLOWC_ASSIGN_OR_RETURN(Digest digest, cache.put(task.dump(1)));
  return TaskInput{kTaskFile, digest};
}

json taskHeader(const char *kind, const compiler::CompileOptions &options,
                const compiler::CodeTarget &target, const std::string &buildId) {
  return {{"format", kTaskFormat},
          {"kind", kind},
          {"build", buildId},
          {"options", optionsJson(options)},
          {"target", targetJson(target)}};
}

/// A task.json as read back: every field checked, errors naming the field.
struct TaskDescription {
  std::string kind;
  compiler::CompileOptions options;
  compiler::CodeTarget target;
  compiler::PlannedKernel kernel;
  /// A measure task's "measure" object.
  json measure;
};

Expected<TaskDescription> readTaskDescription(const std::string &path,
                                              const std::string &buildId) {
  FLOWC_ASSIGN_OR_RETURN(std::string text, readFileToString(path));
  json task = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!task.is_object() || task.value("format", "") != kTaskFormat)
    return invalidArgument(path + ": not a flowc task (" + kTaskFormat + ")");
  if (task.value("build", "") != buildId)
    return failedPrecondition(path + ": the task is for the build '" +
                              task.value("build", "") + "', and this worker is '" +
                              buildId + "'");
  TaskDescription description;
  try {
    description.kind = task.at("kind").get<std::string>();
    const json &options = task.at("options");
    FLOWC_ASSIGN_OR_RETURN(description.options.target,
                           parseTarget(options.at("target").get<std::string>()));
    description.options.optLevel = options.at("opt").get<int>();
    FLOWC_ASSIGN_OR_RETURN(description.options.precision,
                           parsePrecision(options.at("precision").get<std::string>()));
    description.options.disabledPasses =
        options.at("disabled_passes").get<std::vector<std::string>>();
    const json &target = task.at("target");
    description.target = {target.at("triple").get<std::string>(),
                          target.at("cpu").get<std::string>(),
                          target.at("features").get<std::string>()};
    if (description.kind == "codegen") {
      const json &kernel = task.at("kernel");
      description.kernel.symbol = kernel.at("symbol").get<std::string>();
      description.kernel.key = kernel.at("key").get<std::string>();
      description.kernel.candidate = kernel.value("candidate", "");
    }
    if (description.kind == "measure")
      description.measure = task.at("measure");
  } catch (const json::exception &e) {
    return invalidArgument(path + ": " + e.what());
  }
  FLOWC_RETURN_IF_ERROR(description.options.validate().withContext(path));
  return description;
}

/// "canonicalize 0.012 s": a pass event's text for readers of text progress.
std::string passDetail(const std::string &pass, double seconds) {
  char figure[32];
  std::snprintf(figure, sizeof figure, " %.3f s", seconds);
  return pass + figure;
}

Status runPlan(const TaskDescription &task, const std::string &in, const std::string &out,
               const ProgressFn &progress) {
  FLOWC_ASSIGN_OR_RETURN(std::string ir, readFileToString(in + "/" + kGraphFile));
  compiler::PassObserver observer;
  if (progress)
    observer = [&](const std::string &pass, double seconds) {
      ProgressEvent event;
      event.stage = "pass";
      event.detail = passDetail(pass, seconds);
      event.pass = pass;
      event.seconds = seconds;
      progress(event);
    };
  FLOWC_ASSIGN_OR_RETURN(compiler::CompilePlan plan,
                         compiler::planCompile(ir, task.options, task.target, observer));
  json kernels = json::array();
  for (const compiler::PlannedKernel &kernel : plan.kernels)
    kernels.push_back({{"symbol", kernel.symbol},
                       {"key", kernel.key},
                       {"text", kernel.text},
                       {"call_sites", kernel.callSites}});
  json output = {{"format", kPlanFormat},
                 {"weights", codeWeightsJson(plan.weights)},
                 {"kernels", kernels},
                 {"links_openmp", plan.linksOpenMp}};
  FLOWC_RETURN_IF_ERROR(writeFileAtomically(out + "/" + kPlanFile, output.dump()));
  return writeFileAtomically(out + "/" + kGraphObjectFile, plan.graphObject);
}

Status runCodegen(TaskDescription &task, const std::string &in, const std::string &out) {
  FLOWC_ASSIGN_OR_RETURN(task.kernel.text, readFileToString(in + "/" + kKernelFile));
  // A hook for the tests of worker crashes (a crash in the compiler is
  // otherwise hard to come by on purpose): a kernel whose IR has this text.
  if (const char *crash = std::getenv("FLOWC_WORKER_TEST_CRASH");
      crash && *crash && task.kernel.text.find(crash) != std::string::npos)
    std::raise(SIGSEGV);
  FLOWC_ASSIGN_OR_RETURN(std::string object,
                         compiler::compileKernel(task.kernel, task.options, task.target));
  return writeFileAtomically(out + "/" + kKernelObjectFile, object);
}

} // namespace

std::string codeWeightsText(const compiler::CodeWeights &weights,
                            const std::vector<runtime::TunedKernelSpec> &tuned) {
  json text = codeWeightsJson(weights);
  text["tuned"] = runtime::tunedKernelsJson(tuned);
  return text.dump();
}

std::optional<compiler::CodeWeights>
parseCodeWeights(std::string_view bytes, std::vector<runtime::TunedKernelSpec> *tuned) {
  json parsed = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  std::optional<compiler::CodeWeights> weights = codeWeightsFrom(parsed);
  if (!weights || !tuned)
    return weights;
  auto read = runtime::tunedKernelsFromJson(parsed.value("tuned", json()));
  if (!read)
    return std::nullopt;
  *tuned = std::move(*read);
  return weights;
}

Expected<Task> makePlanTask(cache::Cache &cache, const Digest &ir,
                            const compiler::CompileOptions &options,
                            const compiler::CodeTarget &target,
                            const std::string &buildId) {
  FLOWC_ASSIGN_OR_RETURN(
      TaskInput task, storeTaskFile(cache, taskHeader("plan", options, target, buildId)));
  return Task{"plan", "graph", {task, {kGraphFile, ir}}, {kPlanFile, kGraphObjectFile}};
}

Expected<Task> makeCodegenTask(cache::Cache &cache, const compiler::PlannedKernel &kernel,
                               const compiler::CompileOptions &options,
                               const compiler::CodeTarget &target,
                               const std::string &buildId) {
  json header = taskHeader("codegen", options, target, buildId);
  header["kernel"] = {
      {"symbol", kernel.symbol}, {"key", kernel.key}, {"candidate", kernel.candidate}};
  FLOWC_ASSIGN_OR_RETURN(TaskInput task, storeTaskFile(cache, header));
  FLOWC_ASSIGN_OR_RETURN(Digest text, cache.put(kernel.text));
  return Task{"codegen", kernel.symbol, {task, {kKernelFile, text}}, {kKernelObjectFile}};
}

Expected<Task> makeMeasureTask(cache::Cache &cache, json measure,
                               const std::optional<compiler::PlannedKernel> &kernel,
                               const compiler::CompileOptions &options,
                               const std::string &buildId) {
  std::string name = measure.value("signature", "kernel");
  if (kernel) {
    measure["symbol"] = kernel->symbol;
    measure["key"] = kernel->key;
    name = kernel->symbol;
  }
  json header = taskHeader("measure", options, compiler::CodeTarget::host(), buildId);
  header["measure"] = std::move(measure);
  FLOWC_ASSIGN_OR_RETURN(TaskInput task, storeTaskFile(cache, header));
  Task made{"measure", name, {task}, {kMeasureFile}};
  // A GPU kernel is measured on a GPU of the records' device, nowhere else.
  if (isGpuMeasure(header["measure"]))
    made.platform.emplace_back(
        kGpuPlatformProperty,
        runtime::gpuNameOf(header["measure"].value("device", std::string())));
  if (kernel) {
    FLOWC_ASSIGN_OR_RETURN(Digest text, cache.put(kernel->text));
    made.inputs.push_back({kKernelFile, text});
  }
  return made;
}

Expected<Task> makeNoopTask(cache::Cache &cache, const std::string &name,
                            const std::string &buildId) {
  FLOWC_ASSIGN_OR_RETURN(
      TaskInput task,
      storeTaskFile(cache,
                    taskHeader("noop", {}, compiler::CodeTarget::host(), buildId)));
  return Task{"noop", name, {task}, {}};
}

Expected<compiler::CompilePlan> parsePlanOutput(std::string_view planJson,
                                                std::string graphObject) {
  json parsed = json::parse(planJson, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || parsed.value("format", "") != kPlanFormat)
    return dataLoss(std::string("a plan task's output is not a plan (") + kPlanFormat +
                    ")");
  compiler::CompilePlan plan;
  plan.graphObject = std::move(graphObject);
  auto weights = codeWeightsFrom(parsed.value("weights", json()));
  if (!weights)
    return dataLoss("a plan task's output has no readable weight list");
  plan.weights = std::move(*weights);
  try {
    for (const json &kernel : parsed.at("kernels"))
      plan.kernels.push_back(
          {kernel.at("symbol").get<std::string>(), kernel.at("key").get<std::string>(),
           kernel.at("text").get<std::string>(), kernel.at("call_sites").get<int>()});
    plan.linksOpenMp = parsed.at("links_openmp").get<bool>();
  } catch (const json::exception &e) {
    return dataLoss(std::string("a plan task's output is damaged: ") + e.what());
  }
  return plan;
}

Status runTaskDirectory(const std::string &inputDir, const std::string &outputDir,
                        const std::string &buildId, const ProgressFn &progress) {
  FLOWC_ASSIGN_OR_RETURN(TaskDescription task,
                         readTaskDescription(inputDir + "/" + kTaskFile, buildId));
  std::error_code ec;
  std::filesystem::create_directories(outputDir, ec);
  if (ec)
    return errnoStatus(ec.value(),
                       "cannot create the output directory '" + outputDir + "'");
  // Compiling shares the machine; a measurement's timing has it alone.
  std::optional<SharedMachineLock> computing;
  if (task.kind != "noop")
    computing.emplace(machineLockPath());
  if (task.kind == "plan")
    return runPlan(task, inputDir, outputDir, progress);
  if (task.kind == "codegen")
    return runCodegen(task, inputDir, outputDir);
  if (task.kind == "measure")
    return runMeasureTask(task.measure, task.options, inputDir, outputDir, kKernelFile,
                          kMeasureFile);
  // Does nothing: what bench/TaskDispatchBench measures is the rest.
  if (task.kind == "noop")
    return Status::ok();
  return invalidArgument(inputDir + "/" + kTaskFile + ": unknown task kind '" +
                         task.kind + "' (plan, codegen, measure, noop)");
}

Status taskErrorFrom(std::string_view output) {
  constexpr std::string_view kPrefix = "flowc-worker: error: ";
  size_t at = output.rfind(kPrefix);
  if (at == std::string_view::npos)
    return internalError(output.empty() ? "it wrote no error" : std::string(output));
  std::string_view line = output.substr(at + kPrefix.size());
  line = line.substr(0, line.find('\n'));
  for (int code = static_cast<int>(StatusCode::InvalidArgument);
       code <= static_cast<int>(StatusCode::Cancelled); ++code) {
    std::string name = std::string(statusCodeName(static_cast<StatusCode>(code))) + ": ";
    if (line.starts_with(name))
      return Status(static_cast<StatusCode>(code), std::string(line.substr(name.size())));
  }
  return internalError(std::string(line));
}

Expected<TaskDirectory> prepareTask(cache::Cache &cache, const Task &task) {
  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache, "task"));
  TaskDirectory dir{std::move(scratch), "", ""};
  dir.in = dir.scratch.path() + "/in";
  dir.out = dir.scratch.path() + "/out";
  if (::mkdir(dir.in.c_str(), 0700) != 0)
    return errnoStatus(errno, "cannot create the task directory '" + dir.in + "'");
  for (const TaskInput &input : task.inputs) {
    FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob, cache.get(input.digest));
    FLOWC_RETURN_IF_ERROR(writeFileAtomically(dir.in + "/" + input.path, blob.bytes()));
  }
  return dir;
}

Expected<std::vector<Digest>> collectOutputs(cache::Cache &cache, const Task &task,
                                             const std::string &dir) {
  std::vector<Digest> outputs;
  for (const std::string &path : task.outputs) {
    FLOWC_ASSIGN_OR_RETURN(Digest digest, cache.putFile(dir + "/" + path));
    outputs.push_back(digest);
  }
  return outputs;
}

InProcessTaskRunner::InProcessTaskRunner(cache::Cache &cache, std::string buildId,
                                         unsigned threads)
    : cache_(cache), buildId_(std::move(buildId)), threads_(std::max(1u, threads)) {}

Expected<TaskOutcome> InProcessTaskRunner::runOne(const Task &task,
                                                  const ProgressFn &progress) {
  FLOWC_ASSIGN_OR_RETURN(TaskDirectory dir, prepareTask(cache_, task));
  FLOWC_RETURN_IF_ERROR(runTaskDirectory(dir.in, dir.out, buildId_, progress)
                            .withContext(task.kind + " " + task.name));
  FLOWC_ASSIGN_OR_RETURN(std::vector<Digest> outputs,
                         collectOutputs(cache_, task, dir.out));
  return TaskOutcome{std::move(outputs), "in-process"};
}

std::vector<Expected<TaskOutcome>>
InProcessTaskRunner::run(const std::vector<Task> &tasks, const TaskListener &listener) {
  std::vector<Expected<TaskOutcome>> results(tasks.size(), TaskOutcome{});
  forEachConcurrently(tasks.size(), threads_, [&](size_t i) {
    ProgressFn progress;
    if (listener.progress)
      progress = [&, i](const ProgressEvent &event) { listener.progress(i, event); };
    auto start = std::chrono::steady_clock::now();
    results[i] = runOne(tasks[i], progress);
    if (listener.done)
      listener.done(
          i, results[i],
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
              .count());
  });
  return results;
}

Expected<ScratchDir> ScratchDir::create(const cache::Cache &cache,
                                        const std::string &what) {
  // Named `<what>.<pid>.<random>`: a process opening the cache removes the
  // temp entries of dead processes only.
  std::string pattern =
      cache.tmpDir() + "/" + what + "." + std::to_string(cache.tempOwner()) + ".XXXXXX";
  if (!mkdtemp(pattern.data()))
    return errnoStatus(errno,
                       "cannot create a scratch directory in '" + cache.tmpDir() + "'");
  return ScratchDir(pattern);
}

ScratchDir::ScratchDir(ScratchDir &&other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  if (!path_.empty())
    std::filesystem::remove_all(path_, ec);
}

} // namespace flowc::worker
