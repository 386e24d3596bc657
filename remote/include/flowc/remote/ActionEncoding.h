// How a flowc Action becomes REAPI messages: the Command, the input root's
// Directory tree and the Action, each serialized canonically (REAPI's
// rules: sorted names, sorted environment and platform, no duplicates), so
// equal actions have equal digests on every client and the engine's action
// cache answers any of them.
#pragma once

#include "flowc/remote/RemoteExecution.h"

namespace flowc::remote {

/// One blob of an encoded action: its digest and bytes.
struct BlobRef {
  cache::Digest digest;
  std::string_view bytes;
};

struct EncodedAction {
  cache::Digest actionDigest, commandDigest, inputRootDigest;
  /// Serialized build.bazel.remote.execution.v2.Action and Command.
  std::string action, command;
  /// Serialized Directory messages of the input root, root first.
  std::vector<std::string> directories;
  std::vector<cache::Digest> directoryDigests;
  /// Output paths in the order of Action::outputFiles.
  std::vector<std::string> outputFiles;

  /// Every blob the engine needs, each digest once: the Action, the
  /// Command, the directories and the input files (viewing the caller's
  /// bytes). Valid while this object and the caller's inputs live.
  std::vector<BlobRef> blobs(const Action &source) const;
};

/// Encodes `action`. InvalidArgument naming the field and value at fault: a
/// path that is empty, absolute, has an empty, "." or ".." segment or a NUL;
/// a path given twice or both a file and a directory; input bytes whose
/// size differs from their digest; no arguments; an environment name that
/// is empty, holds '=' or repeats; an empty platform name or a repeated
/// property; a negative timeout. Thread-safe.
Expected<EncodedAction> encodeAction(const Action &action);

} // namespace flowc::remote
