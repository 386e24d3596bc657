#include "RuntimeModule.h"

#include "flowc/support/Subprocess.h"

#include <dlfcn.h>
#include <mutex>

namespace flowc::cli {

Expected<const RuntimeModule *> runtimeModule() {
  static std::once_flag once;
  static Expected<const RuntimeModule *> loaded = unavailable("not loaded");
  std::call_once(once, [] {
    std::string path = executableDirectory() + "/../lib/libflowc-cli-runtime.so";
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      loaded = unavailable("cannot load the runtime module '" + path + "': " + dlerror());
      return;
    }
    auto entry =
        reinterpret_cast<const RuntimeModule *(*)()>(dlsym(handle, kRuntimeModuleEntry));
    if (!entry) {
      loaded = unavailable("'" + path + "' has no " + kRuntimeModuleEntry);
      return;
    }
    loaded = entry();
  });
  return loaded;
}

} // namespace flowc::cli
