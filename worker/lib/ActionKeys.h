// The one way the worker makes an action-cache key: a versioned kind, the
// build that computes the value, then the parts the value depends on, each
// on a line of its own, hashed. A key that changes meaning changes its
// version; none can leave out the build.
#pragma once

#include "flowc/cache/Digest.h"
#include "flowc/runtime/Artifact.h"

#include <string>
#include <string_view>

namespace flowc::worker {

/// "flowc.artifact.v2": the artifact format artifact keys and metadata name.
inline std::string artifactFormat() {
  return "flowc.artifact.v" + std::to_string(runtime::kArtifactVersion);
}

class ActionKey {
public:
  /// `kind`: "flowc.code.v1".
  ActionKey(std::string_view kind, std::string_view buildId) { add(kind).add(buildId); }
  ActionKey &add(std::string_view part) {
    text_.append(part);
    text_.push_back('\n');
    return *this;
  }
  cache::Digest digest() const { return cache::digestOf(text_); }
  /// The key of a second value of the same answer (a code object's weight
  /// list, a packed weight's layout).
  cache::Digest digestOf(std::string_view value) const {
    return cache::digestOf(text_ + std::string(value) + "\n");
  }

private:
  std::string text_;
};

} // namespace flowc::worker
