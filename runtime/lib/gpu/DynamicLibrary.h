// The CUDA libraries the runtime opens with dlopen when a session first
// needs them, never links (cuDNN and cuBLASLt: LibraryKernels.cpp; NCCL:
// Nccl.cpp): how each is found, its functions bound and its version named.
#pragma once

#include "flowc/support/Status.h"

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace flowc::runtime::gpu {

/// `soname` through the loader's search path, then in `directory` (where
/// the configure step found the toolkit's libraries, for a machine whose
/// loader does not know it); Unavailable with dlerror's reason. Never
/// closed: what it loads may be in use on any thread until exit.
inline Expected<void *> openLibrary(const char *soname, const char *directory) {
  if (void *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL))
    return library;
  std::string reason = dlerror();
  std::string path = std::string(directory) + "/" + soname;
  if (void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
    return library;
  return unavailable(std::string(soname) + " cannot be loaded (" + reason +
                     "; nor from " + directory + ")");
}

/// `library`'s function `name` into `slot`; `name` joins `missing` when it
/// has none.
template <typename Function>
void bindSymbol(void *library, Function &slot, const char *name,
                std::vector<std::string> &missing) {
  slot = reinterpret_cast<Function>(dlsym(library, name));
  if (!slot)
    missing.push_back(name);
}

/// "a, b, c": the functions a library lacks, for its message.
inline std::string joinedNames(const std::vector<std::string> &names) {
  std::string joined;
  for (const std::string &name : names)
    joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

/// "2.28.9" of the version number cuDNN 9, cuBLASLt and NCCL (2.9 on)
/// report: major * 10000 + minor * 100 + patch.
inline std::string dottedVersion(int64_t version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
         "." + std::to_string(version % 100);
}

} // namespace flowc::runtime::gpu
