#include "RuntimeModule.h"

#include "flowc/support/Subprocess.h"

#include <dlfcn.h>
#include <mutex>

namespace flowc::cli {

Expected<const void *> loadCliModule(const std::string &library, const char *entrySymbol,
                                     const std::string &what) {
  std::string path = executableDirectory() + "/../lib/" + library;
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return unavailable("cannot load the " + what + " module '" + path +
                       "': " + dlerror());
  auto entry = reinterpret_cast<const void *(*)()>(dlsym(handle, entrySymbol));
  if (!entry)
    return unavailable("'" + path + "' has no " + entrySymbol);
  return entry();
}

Expected<const RuntimeModule *> runtimeModule() {
  static std::once_flag once;
  static Expected<const RuntimeModule *> loaded = unavailable("not loaded");
  std::call_once(once, [] {
    auto module =
        loadCliModule("libflowc-cli-runtime.so", kRuntimeModuleEntry, "runtime");
    if (!module)
      loaded = module.status();
    else
      loaded = static_cast<const RuntimeModule *>(*module);
  });
  return loaded;
}

} // namespace flowc::cli
