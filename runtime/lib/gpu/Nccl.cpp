// NCCL through dlopen (Nccl.h). Built against the toolkit's nccl.h, for its
// types and constants; without it every call is Unimplemented.
#include "Nccl.h"

#ifdef FLOWC_HAVE_NCCL

#include "DynamicLibrary.h"

#include <chrono>
#include <nccl.h>
#include <spdlog/spdlog.h>

namespace flowc::runtime::gpu {

namespace {

constexpr const char *kNcclLibrary = "libnccl.so.2";
constexpr const char *kLibraryDir = FLOWC_CUDA_LIBRARY_DIR;

/// The functions the runtime calls.
struct NcclLibrary {
  ncclResult_t (*getVersion)(int *version) = nullptr;
  const char *(*getErrorString)(ncclResult_t result) = nullptr;
  const char *(*getLastError)(ncclComm_t comm) = nullptr;
  ncclResult_t (*commInitAll)(ncclComm_t *comms, int count, const int *devices) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t comm) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  ncclResult_t (*broadcast)(const void *source, void *destination, size_t count,
                            ncclDataType_t type, int root, ncclComm_t comm,
                            cudaStream_t stream) = nullptr;
  std::string version;
};

Expected<NcclLibrary> loadNccl() {
  FLOWC_ASSIGN_OR_RETURN(void *library, openLibrary(kNcclLibrary, kLibraryDir));
  NcclLibrary nccl;
  std::vector<std::string> missing;
  bindSymbol(library, nccl.getVersion, "ncclGetVersion", missing);
  bindSymbol(library, nccl.getErrorString, "ncclGetErrorString", missing);
  bindSymbol(library, nccl.getLastError, "ncclGetLastError", missing);
  bindSymbol(library, nccl.commInitAll, "ncclCommInitAll", missing);
  bindSymbol(library, nccl.commDestroy, "ncclCommDestroy", missing);
  bindSymbol(library, nccl.groupStart, "ncclGroupStart", missing);
  bindSymbol(library, nccl.groupEnd, "ncclGroupEnd", missing);
  bindSymbol(library, nccl.broadcast, "ncclBroadcast", missing);
  if (!missing.empty())
    return unavailable(std::string(kNcclLibrary) + " lacks " + joinedNames(missing) +
                       " (NCCL 2.13 or later is needed)");
  int code = 0;
  if (nccl.getVersion(&code) != ncclSuccess)
    return unavailable(std::string(kNcclLibrary) + ": ncclGetVersion failed");
  nccl.version = "NCCL " + dottedVersion(code);
  return nccl;
}

const Expected<NcclLibrary> &processNccl() {
  static const Expected<NcclLibrary> nccl = loadNccl();
  return nccl;
}

Status ncclError(const NcclLibrary &nccl, ncclResult_t result, const std::string &call,
                 ncclComm_t comm = nullptr) {
  std::string message = call + " failed: " + nccl.getErrorString(result);
  const char *last = nccl.getLastError(comm);
  if (last && *last)
    message += std::string(" (") + last + ")";
  return internalError(message);
}

/// The communicators of one broadcast, destroyed with it.
class Communicators {
public:
  explicit Communicators(const NcclLibrary &nccl) : nccl_(nccl) {}
  ~Communicators() {
    for (ncclComm_t comm : comms_)
      if (comm)
        if (ncclResult_t result = nccl_.commDestroy(comm); result != ncclSuccess)
          spdlog::warn("ncclCommDestroy failed: {}", nccl_.getErrorString(result));
  }
  Communicators(const Communicators &) = delete;
  Communicators &operator=(const Communicators &) = delete;

  Status init(const std::vector<int> &ordinals) {
    comms_.assign(ordinals.size(), nullptr);
    if (ncclResult_t result = nccl_.commInitAll(
            comms_.data(), static_cast<int>(ordinals.size()), ordinals.data());
        result != ncclSuccess) {
      comms_.assign(ordinals.size(), nullptr);
      return ncclError(nccl_, result, "ncclCommInitAll");
    }
    return Status::ok();
  }
  ncclComm_t operator[](size_t rank) const { return comms_[rank]; }

private:
  const NcclLibrary &nccl_;
  std::vector<ncclComm_t> comms_;
};

} // namespace

Expected<std::string> ncclVersion() {
  const Expected<NcclLibrary> &nccl = processNccl();
  if (!nccl)
    return nccl.status();
  return nccl->version;
}

Expected<BroadcastTimes>
ncclBroadcast(const std::vector<BroadcastRank> &ranks, uint64_t bytes,
              const std::function<Status(size_t rank)> &synchronize) {
  auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point from) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
  };
  const Expected<NcclLibrary> &loaded = processNccl();
  if (!loaded)
    return loaded.status();
  const NcclLibrary &nccl = *loaded;
  if (ranks.size() < 2)
    return invalidArgument("a broadcast needs two devices or more");
  std::vector<int> ordinals;
  for (const BroadcastRank &rank : ranks)
    ordinals.push_back(rank.ordinal);
  Communicators comms(nccl);
  FLOWC_RETURN_IF_ERROR(comms.init(ordinals));
  BroadcastTimes times;
  times.setupSeconds = since(start);
  auto copyStart = std::chrono::steady_clock::now();
  // One group: the ranks' calls are issued from this one thread, which
  // NCCL allows only inside a group.
  if (ncclResult_t result = nccl.groupStart(); result != ncclSuccess)
    return ncclError(nccl, result, "ncclGroupStart");
  Status queued = Status::ok();
  for (size_t rank = 0; rank < ranks.size() && queued.isOk(); ++rank) {
    auto *buffer = reinterpret_cast<void *>(static_cast<uintptr_t>(ranks[rank].buffer));
    if (ncclResult_t result =
            nccl.broadcast(buffer, buffer, bytes, ncclInt8, /*root=*/0, comms[rank],
                           static_cast<cudaStream_t>(ranks[rank].stream));
        result != ncclSuccess)
      queued = ncclError(nccl, result,
                         "ncclBroadcast to device " + std::to_string(ranks[rank].ordinal),
                         comms[rank]);
  }
  if (ncclResult_t result = nccl.groupEnd(); result != ncclSuccess && queued.isOk())
    queued = ncclError(nccl, result, "ncclGroupEnd");
  // The communicators outlive the copies they queued: each stream is
  // waited for, whatever failed.
  Status finished = Status::ok();
  for (size_t rank = 0; rank < ranks.size(); ++rank)
    if (Status status = synchronize(rank); !status && finished.isOk())
      finished = std::move(status);
  FLOWC_RETURN_IF_ERROR(queued);
  FLOWC_RETURN_IF_ERROR(finished);
  times.copySeconds = since(copyStart);
  return times;
}

} // namespace flowc::runtime::gpu

#else // !FLOWC_HAVE_NCCL

namespace flowc::runtime::gpu {

namespace {
Status withoutNccl() {
  return unimplemented("this runtime was built without NCCL (no nccl.h in the CUDA "
                       "toolkit at configure time)");
}
} // namespace

Expected<std::string> ncclVersion() { return withoutNccl(); }

Expected<BroadcastTimes> ncclBroadcast(const std::vector<BroadcastRank> &, uint64_t,
                                       const std::function<Status(size_t rank)> &) {
  return withoutNccl();
}

} // namespace flowc::runtime::gpu

#endif
