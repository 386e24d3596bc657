// Remote submit, the client's half: the model's files hashed here (with a
// stat memo), the blobs the daemon lacks uploaded in 1 MiB chunks
// (resumed after an interruption), and the submit sent as a manifest of
// digests. The daemon never opens a path of this machine.
#pragma once

#include "Common.h"

#include "flowc/support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flowc::cli {

struct UploadReport {
  uint64_t modelBlobs = 0;    ///< Files of the model (the .onnx and its data).
  uint64_t modelBytes = 0;    ///< Their bytes.
  uint64_t uploadedBlobs = 0; ///< Blobs the daemon lacked, uploaded.
  uint64_t uploadedBytes = 0; ///< Bytes sent (resumed uploads: only the rest).
  uint64_t hashedBytes = 0;   ///< Bytes hashed (the memo answered for the rest).
  double hashSeconds = 0;
  double uploadSeconds = 0;
};

/// Hashes the model at `modelPath` (absolute) and the external-data files
/// its tensors name (relative to its directory, refused with the daemon's
/// ingest rules: not absolute, no `..`, no symlink), uploads the blobs the
/// daemon lacks and sets `request.model` to the manifest. The memo of
/// hashes lives under `memoDir`. InvalidArgument for a model whose
/// protobuf cannot be scanned or names a bad location (file and tensor
/// named), NotFound for a missing data file, DataLoss when a file changes
/// while it is hashed or uploaded, the daemon's status otherwise.
Expected<UploadReport> uploadModel(DaemonClient &client, const std::string &modelPath,
                                   const std::string &memoDir,
                                   flowc::v1::SubmitRequest &request);

/// The external-data files the tensors of the ONNX model at `modelPath`
/// name, relative to its directory, normalized, each once, in the order
/// first named (the files a watch of the model must see change). The
/// locations are checked with the ingest's rules (relative, no `..`).
/// InvalidArgument for a file that is not a regular file or not a
/// scannable ONNX protobuf, or a bad location (file and tensor named);
/// errno statuses when it cannot be opened.
Expected<std::vector<std::string>> externalDataFiles(const std::string &modelPath);

} // namespace flowc::cli
