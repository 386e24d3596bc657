// NCCL for the runtime: one process driving several GPUs of a machine
// (Session::createReplicas) broadcasts a block of device memory from the
// first device to the others over NVLink or PCIe, instead of reading and
// uploading the artifact's weights once per device. libnccl.so.2 is opened
// with dlopen when first needed, never linked: a machine without it, or
// with one GPU, runs everything else.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flowc::runtime::gpu {

/// One device's part of a broadcast: its ordinal, the device buffer (a
/// CUdeviceptr) it receives into (the first device's holds the source)
/// and the stream (a CUstream of the device's primary context) it runs on.
struct BroadcastRank {
  int ordinal = 0;
  uint64_t buffer = 0;
  void *stream = nullptr;
};

/// "NCCL 2.28.9", after loading the library on the first call (the answer
/// is the process's for good). Unavailable naming the library and the
/// loader's words when it cannot be loaded or lacks a function; Unimplemented
/// when this runtime was built without nccl.h.
Expected<std::string> ncclVersion();

/// How long a broadcast took.
struct BroadcastTimes {
  /// Making the communicators (ncclCommInitAll).
  double setupSeconds = 0;
  /// The broadcast, until every stream is idle.
  double copySeconds = 0;
};

/// Broadcasts `bytes` from ranks[0]'s buffer into every other rank's,
/// through a communicator over the ranks' devices made for it
/// (ncclCommInitAll) and destroyed once `synchronize(i)` has waited for
/// rank i's stream. Distinct ordinals, at least two. Changes the calling
/// thread's current CUDA context (the caller restores its own).
/// Unavailable without NCCL, Internal naming the NCCL call and its words
/// otherwise.
Expected<BroadcastTimes>
ncclBroadcast(const std::vector<BroadcastRank> &ranks, uint64_t bytes,
              const std::function<Status(size_t rank)> &synchronize);

} // namespace flowc::runtime::gpu
