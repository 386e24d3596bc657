#include "flowc/runtime/Session.h"
#include "Gpu.h"
#include "Kernels.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/support/Format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <new>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

namespace flowc::runtime {

namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
#error "the ELF machine of code objects for this host is not known"
#endif

/// A name of `fd`'s file, /proc/self/fd/N, that no loaded library was
/// loaded under. dlopen finds a loaded library by that name before it looks
/// at the file: another session's code, loaded from a descriptor since
/// closed whose number `fd` now has, would be this session's too (its code
/// and its globals). While this session holds `fd`, no other loads from
/// number N; a library that stays loaded after its dlclose keeps the name,
/// so such a number is skipped with dup().
Expected<std::string> unloadedName(int &fd, const std::string &artifactPath) {
  constexpr int kTries = 64;
  std::vector<int> taken;
  auto release = [&] {
    for (int number : taken)
      close(number);
  };
  for (int i = 0; i < kTries; ++i) {
    std::string name = "/proc/self/fd/" + std::to_string(fd);
    void *loaded = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!loaded) {
      release();
      return name;
    }
    dlclose(loaded);
    taken.push_back(fd);
    fd = dup(fd);
    if (fd < 0) {
      Status failed = errnoStatus(errno, "dup for the code of '" + artifactPath + "'");
      fd = taken.back();
      taken.pop_back();
      release();
      return failed;
    }
  }
  release();
  return unavailable("cannot load the code of '" + artifactPath +
                     "': " + std::to_string(kTries) +
                     " descriptor names in a row are taken by loaded libraries");
}

/// dlopen needs a file: the code section goes to an anonymous memfd, so
/// nothing is left on disk and concurrent sessions never collide. The memfd
/// is sealed before it is checked, and checked before dlopen: the bytes
/// loaded are the bytes that matched the table, even if the artifact file
/// changed after it was opened.
Expected<void *> loadCode(const Artifact &artifact) {
  std::string_view code = artifact.section(SectionKind::Code);
  const std::string &artifactPath = artifact.path();
  uint16_t machine = 0;
  std::memcpy(&machine, code.data() + offsetof(Elf64_Ehdr, e_machine), sizeof machine);
  if (machine != kHostMachine)
    return unavailable("the code of '" + artifactPath + "' is for ELF machine " +
                       std::to_string(machine) + ", not this host's (" +
                       std::to_string(kHostMachine) + ")");
  int fd = memfd_create("flowc-code", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return errnoStatus(errno, "memfd_create for '" + artifactPath + "'");
  auto fail = [&](Status status) {
    close(fd);
    return status;
  };
  size_t done = 0;
  while (done < code.size()) {
    ssize_t n = ::write(fd, code.data() + done, code.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return fail(errnoStatus(errno, "writing code of '" + artifactPath + "'"));
    done += static_cast<size_t>(n);
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) !=
      0)
    return fail(errnoStatus(errno, "sealing the code of '" + artifactPath + "'"));
  if (artifact.verification() == Verification::Digests) {
    void *sealed = mmap(nullptr, code.size(), PROT_READ, MAP_PRIVATE, fd, 0);
    if (sealed == MAP_FAILED)
      return fail(errnoStatus(errno, "mapping the code of '" + artifactPath + "'"));
    Sha256 actual =
        sectionDigests({{static_cast<const char *>(sealed), code.size()}}, 1)[0];
    munmap(sealed, code.size());
    if (actual != artifact.sectionDigest(SectionKind::Code))
      return fail(dataLoss("'" + artifactPath + "': code section is damaged: sha256 " +
                           sha256Hex(actual) + " does not match the artifact's table (" +
                           sha256Hex(artifact.sectionDigest(SectionKind::Code)) +
                           "); the file changed after it was opened"));
  }
  Expected<std::string> name = unloadedName(fd, artifactPath);
  void *library = name ? dlopen(name->c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  close(fd);
  if (!name)
    return name.status();
  if (!library)
    return unavailable("cannot load the code of '" + artifactPath + "': " + dlerror());
  return library;
}

} // namespace

/// The timings a profiling session gathers, and where each call began.
struct ProfileRecorder {
  RunProfile profile;
  std::vector<std::chrono::steady_clock::time_point> started;
};

namespace {

/// The recorder of the run in progress on this thread: generated code calls
/// the hook from the thread that runs the graph.
thread_local ProfileRecorder *activeRecorder = nullptr;

void recordMark(int64_t event) {
  ProfileRecorder *recorder = activeRecorder;
  if (!recorder || event < 0)
    return;
  auto now = std::chrono::steady_clock::now();
  auto call = static_cast<size_t>(event / 2);
  if (call >= recorder->started.size())
    return;
  if (event % 2 == 0) {
    recorder->started[call] = now;
    return;
  }
  KernelCallTiming &timing = recorder->profile.calls[call];
  timing.seconds += std::chrono::duration<double>(now - recorder->started[call]).count();
  ++timing.calls;
}

/// The mark hook of CUDA code. Launches are asynchronous, so a host clock
/// alone would time the launch, not the kernel: each mark first waits for
/// the stream, and the time between a call's marks is its kernels'.
void recordGpuMark(int64_t event) {
  synchronizeActiveGpu();
  recordMark(event);
}

/// `flowc_profile_calls`' entries (KernelAbi.h); DataLoss naming `path`
/// when they are malformed.
Expected<std::vector<KernelCallTiming>> profiledCalls(const char *text,
                                                      const std::string &path) {
  auto bad = [&](const std::string &why) {
    return dataLoss("'" + path + "': the code's profile calls are malformed: " + why);
  };
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (!json.is_array())
    return bad("not a JSON array");
  std::vector<KernelCallTiming> calls;
  for (const nlohmann::json &entry : json) {
    if (!entry.is_object() || !entry.contains("kernel") || !entry["kernel"].is_string() ||
        !entry.contains("nodes") || !entry["nodes"].is_array())
      return bad("entry " + std::to_string(calls.size()) + " lacks kernel or nodes");
    KernelCallTiming call;
    call.kernel = entry["kernel"].get<std::string>();
    for (const nlohmann::json &node : entry["nodes"]) {
      if (!node.is_number_integer() || node.get<int64_t>() < 0 ||
          node.get<int64_t>() > INT32_MAX)
        return bad("entry " + std::to_string(calls.size()) + " has a bad node index");
      call.nodes.push_back(node.get<int32_t>());
    }
    if (entry.contains("bytes")) {
      if (!entry["bytes"].is_number_unsigned())
        return bad("entry " + std::to_string(calls.size()) + " has a bad byte count");
      call.bytes = entry["bytes"].get<uint64_t>();
    }
    if (entry.contains("site")) {
      if (!entry["site"].is_number_integer() || !entry.contains("kind") ||
          !entry["kind"].is_string())
        return bad("entry " + std::to_string(calls.size()) + " has a bad site or kind");
      call.site = entry["site"].get<int64_t>();
      call.kind = entry["kind"].get<std::string>();
      call.implementation.clear();
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

} // namespace

Session::~Session() {
  kernels_.reset();
  // Unloads the kernels (flowc_gpu_unload) while the code is still loaded.
  gpu_.reset();
  if (library_)
    dlclose(library_);
}

Expected<std::unique_ptr<Session>> Session::create(std::shared_ptr<Artifact> artifact,
                                                   SessionOptions options) {
  return createWith(std::move(artifact), std::move(options), /*uploadWeights=*/true);
}

Expected<Replicas> Session::createReplicas(std::shared_ptr<Artifact> artifact,
                                           SessionOptions options,
                                           const std::vector<int> &devices) {
  if (devices.empty())
    return invalidArgument("replicas need at least one GPU device");
  for (size_t i = 0; i < devices.size(); ++i)
    if (std::find(devices.begin(), devices.begin() + static_cast<ptrdiff_t>(i),
                  devices[i]) != devices.begin() + static_cast<ptrdiff_t>(i))
      return invalidArgument("GPU device " + std::to_string(devices[i]) +
                             " is named twice: a replica per device");
  Replicas replicas;
  for (size_t i = 0; i < devices.size(); ++i) {
    options.gpuDevice = devices[i];
    FLOWC_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                           createWith(artifact, options, /*uploadWeights=*/i == 0));
    if (!session->gpu_)
      return invalidArgument("'" + artifact->path() +
                             "' is CPU code: replicas are for CUDA code, one per GPU");
    replicas.sessions.push_back(std::move(session));
  }
  std::vector<GpuContext *> others;
  for (size_t i = 1; i < replicas.sessions.size(); ++i)
    others.push_back(replicas.sessions[i]->gpu_.get());
  FLOWC_ASSIGN_OR_RETURN(replicas.weights,
                         copyGpuWeights(*replicas.sessions[0]->gpu_, others, *artifact));
  return replicas;
}

Expected<std::unique_ptr<Session>> Session::createWith(std::shared_ptr<Artifact> artifact,
                                                       SessionOptions options,
                                                       bool uploadWeights) {
  if (options.threads < 0)
    return invalidArgument("thread count " + std::to_string(options.threads) +
                           " is negative");
  const Plan &plan = artifact->plan();
  FLOWC_RETURN_IF_ERROR(artifact->requireWeights());
  FLOWC_ASSIGN_OR_RETURN(void *library, loadCode(*artifact));
  auto entry = reinterpret_cast<void (*)(void **)>(dlsym(library, plan.entry.c_str()));
  if (!entry) {
    dlclose(library);
    return dataLoss("'" + artifact->path() + "': code has no entry symbol '" +
                    plan.entry + "'");
  }
  std::unique_ptr<Session> session(new Session(artifact, library, entry, options));
  FLOWC_RETURN_IF_ERROR(session->readChecks());
  if (isGpuCode(library))
    FLOWC_RETURN_IF_ERROR(session->bindDevice(uploadWeights));
  else
    FLOWC_RETURN_IF_ERROR(session->bindHost());
  if (options.profile)
    FLOWC_RETURN_IF_ERROR(session->startProfiling());
  return session;
}

Status Session::bindHost() {
  // Primitives are created for the thread count they run with.
  applyThreads();
  FLOWC_ASSIGN_OR_RETURN(kernels_, bindKernels(library_, *artifact_));
  return allocateArena();
}

bool Session::replaysGpuGraph() const {
  return gpu_ && flowc::runtime::replaysGpuGraph(*gpu_);
}

std::vector<GpuKernelChoice> Session::gpuKernelChoices() const {
  return gpu_ ? flowc::runtime::gpuKernelChoices(*gpu_) : std::vector<GpuKernelChoice>();
}

const char *gpuChoiceSourceName(GpuKernelChoice::Source source) {
  switch (source) {
  case GpuKernelChoice::Source::Library:
    return "library";
  case GpuKernelChoice::Source::Trials:
    return "trials";
  case GpuKernelChoice::Source::Record:
    return "record";
  case GpuKernelChoice::Source::Plan:
    return "plan";
  }
  return "unknown";
}

Status Session::bindDevice(bool uploadWeights) {
  FLOWC_ASSIGN_OR_RETURN(
      gpu_, bindGpu(library_, *artifact_, options_, checks_.size(), uploadWeights));
  arenaBytes_ = gpuArenaBytes(*gpu_);
  return Status::ok();
}

/// Generated code reads a bool as its byte's lowest bit, and LLVM may
/// assume the byte is 0 or 1: any other byte gives answers that depend on
/// the op (Where takes 2 as false, Not turns it into 3).
static Status checkBoolInputs(const Plan &plan, const std::vector<const void *> &inputs) {
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    if (plan.inputs[i].dtype != "bool")
      continue;
    auto *bytes = static_cast<const uint8_t *>(inputs[i]);
    uint64_t count = plan.inputs[i].byteSize();
    for (uint64_t at = 0; at < count; ++at)
      if (bytes[at] > 1)
        return invalidArgument("input '" + plan.inputs[i].name + "' (bool) holds byte " +
                               std::to_string(bytes[at]) + " at element " +
                               std::to_string(at) + "; a bool is 0 or 1");
  }
  return Status::ok();
}

Status Session::readChecks() {
  auto *text = static_cast<const char *>(dlsym(library_, kChecksSymbol));
  if (!text)
    return Status::ok();
  auto malformed = [&] {
    return dataLoss("'" + artifact_->path() + "': the code's " + kChecksSymbol +
                    " is not a JSON array of strings");
  };
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_array())
    return malformed();
  for (const nlohmann::json &check : json) {
    if (!check.is_string())
      return malformed();
    checks_.push_back(check.get<std::string>());
  }
  checkFlags_.assign(checks_.size(), 0);
  return Status::ok();
}

Status Session::takeFailedCheck() {
  for (size_t i = 0; i < checks_.size(); ++i)
    if (checkFlags_[i] != 0)
      return invalidArgument(checks_[i]);
  return Status::ok();
}

Status Session::startProfiling() {
  auto *hook = static_cast<ProfileHook *>(dlsym(library_, kProfileHookSymbol));
  auto *text = static_cast<const char *>(dlsym(library_, kProfileCallsSymbol));
  if (!hook || !text)
    return unavailable("'" + artifact_->path() +
                       "' has no profile marks: its code was compiled by a flowc "
                       "older than `flowc run --profile`; compile the model again");
  FLOWC_ASSIGN_OR_RETURN(std::vector<KernelCallTiming> calls,
                         profiledCalls(text, artifact_->path()));
  profile_ = std::make_shared<ProfileRecorder>();
  profile_->started.resize(calls.size());
  profile_->profile.calls = std::move(calls);
  // A graph's replay would pass no marks, and a capture cannot synchronize.
  if (gpu_)
    allowGpuGraphs(*gpu_, false);
  *hook = gpu_ ? recordGpuMark : recordMark;
  return Status::ok();
}

RunProfile Session::profile() const {
  if (!profile_)
    return {};
  RunProfile profile = profile_->profile;
  for (KernelCallTiming &call : profile.calls)
    if (call.site >= 0 && kernels_)
      call.implementation = siteImplementation(*kernels_, call.site);
  return profile;
}

Status Session::allocateArena() {
  auto *bytes = static_cast<const uint64_t *>(dlsym(library_, kArenaBytesSymbol));
  if (!bytes || *bytes == 0)
    return Status::ok();
  // Rounded up: aligned_alloc wants a multiple of the alignment.
  uint64_t size = (*bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  arena_.reset(static_cast<std::byte *>(std::aligned_alloc(kArenaAlignment, size)));
  if (!arena_)
    return resourceExhausted("cannot allocate the " + std::to_string(*bytes) +
                             "-byte activation arena of '" + artifact_->path() + "'");
  arenaBytes_ = *bytes;
  return Status::ok();
}

int64_t Session::prepackedWeightsInUse() const {
  return kernels_ ? runtime::prepackedWeightsInUse(*kernels_) : 0;
}

int64_t Session::libraryKernelSites() const {
  auto *sites = static_cast<const int64_t *>(dlsym(library_, kKernelSitesSymbol));
  return sites ? *sites : 0;
}

void Session::applyThreads() const {
  // OpenMP's thread count is per calling thread: set it where runs happen.
  if (options_.threads > 0)
    omp_set_num_threads(options_.threads);
}

Expected<std::vector<Tensor>> Session::run(const std::map<std::string, Tensor> &inputs) {
  const Plan &plan = artifact_->plan();
  std::vector<const void *> inputBuffers;
  for (const TensorSpec &spec : plan.inputs) {
    auto it = inputs.find(spec.name);
    if (it == inputs.end())
      return invalidArgument("missing input '" + spec.name + "' of shape " +
                             shapeString(spec.shape));
    if (it->second.shape != spec.shape)
      return invalidArgument("input '" + spec.name + "' has shape " +
                             shapeString(it->second.shape) + ", the model expects " +
                             shapeString(spec.shape));
    if (it->second.dtype != spec.dtype)
      return invalidArgument("input '" + spec.name + "' is " + it->second.dtype +
                             ", the model expects " + spec.dtype);
    inputBuffers.push_back(it->second.data());
  }
  for (const auto &[name, tensor] : inputs) {
    bool known = false;
    for (const TensorSpec &spec : plan.inputs)
      known = known || spec.name == name;
    if (!known)
      return invalidArgument("the model has no input named '" + name + "'");
  }
  std::vector<Tensor> outputs;
  // The plan's shapes passed validation, but may still not fit in memory.
  try {
    outputs.reserve(plan.outputs.size());
    for (const TensorSpec &spec : plan.outputs)
      // The code writes every byte of every output.
      outputs.push_back(Tensor::uninitialized(spec.dtype, spec.shape));
  } catch (const std::bad_alloc &) {
    return resourceExhausted("cannot allocate the outputs of '" + artifact_->path() +
                             "'");
  } catch (const std::length_error &) {
    return resourceExhausted("the outputs of '" + artifact_->path() +
                             "' exceed what can be allocated");
  }
  std::vector<void *> outputBuffers;
  for (Tensor &output : outputs)
    outputBuffers.push_back(output.data());
  FLOWC_RETURN_IF_ERROR(runInPlace(inputBuffers, outputBuffers));
  return outputs;
}

Status Session::runInPlace(const std::vector<const void *> &inputs,
                           const std::vector<void *> &outputs) {
  const Plan &plan = artifact_->plan();
  assert(inputs.size() == plan.inputs.size() && outputs.size() == plan.outputs.size() &&
         "one buffer per plan input and output");
  FLOWC_RETURN_IF_ERROR(checkBoolInputs(plan, inputs));
  // The checks' flags follow the outputs; the code only ever sets them.
  std::fill(checkFlags_.begin(), checkFlags_.end(), 0);
  std::vector<void *> results = outputs;
  for (uint64_t &flag : checkFlags_)
    results.push_back(&flag);
  if (gpu_) {
    FLOWC_RETURN_IF_ERROR(
        runOnGpu(*gpu_, inputs, results, [this](void **args) { callEntry(args); }));
    return takeFailedCheck();
  }
  // The generated code only reads inputs.
  std::vector<void *> args;
  for (const void *input : inputs)
    args.push_back(const_cast<void *>(input));
  // Weights are bound in place from the mapped artifact (or, for a thin
  // one, the mapped cache files).
  for (size_t i = 0; i < plan.weights.size(); ++i)
    args.push_back(const_cast<char *>(artifact_->weightBytes(i).data()));
  args.insert(args.end(), results.begin(), results.end());
  if (arena_)
    args.push_back(arena_.get());
  applyThreads();
  callEntry(args.data());
  if (kernels_)
    FLOWC_RETURN_IF_ERROR(takeKernelFailure(*kernels_));
  return takeFailedCheck();
}

void Session::callEntry(void **args) {
  if (!profile_) {
    entry_(args);
    return;
  }
  activeRecorder = profile_.get();
  auto start = std::chrono::steady_clock::now();
  entry_(args);
  // CUDA code's run ends when its stream is idle, not when the entry,
  // which only queues launches, returns.
  if (gpu_)
    synchronizeActiveGpu();
  profile_->profile.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++profile_->profile.runs;
  activeRecorder = nullptr;
}

} // namespace flowc::runtime
