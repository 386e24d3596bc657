// A tensor's name, dtype and shape as the worker's JSON documents write it
// (the model manifest, the model page's view).
#pragma once

#include "flowc/compiler/OnnxModel.h"

#include <nlohmann/json.hpp>

namespace flowc::worker {

inline nlohmann::json tensorJson(const compiler::TensorInfo &info) {
  return {{"name", info.name},
          {"dtype", compiler::dtypeName(info.dtype)},
          {"shape", info.shape}};
}

} // namespace flowc::worker
