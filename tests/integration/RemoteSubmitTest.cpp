// Remote submit's protocol against a real flowcd, from a gRPC client of the
// test's own that sends what a hostile or broken client would: bad digests
// and manifests, bytes that do not match their digest, chunks out of
// order, an upload that stops half-way (and resumes, by hand and by the
// CLI).
#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/Sha256.h"

#include "flowc/v1/flowc.grpc.pb.h"

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <thread>

namespace flowc {
namespace {

using namespace flowc::testing;
namespace fs = std::filesystem;
namespace v1 = flowc::v1;

constexpr size_t kMiB = 1 << 20;

std::string digestOf(const std::string &bytes) {
  return "sha256:" + sha256Hex(sha256Of(bytes)) + "/" + std::to_string(bytes.size());
}

/// Bytes that are not all alike (a blob of zeros would hide an offset bug).
std::string pattern(size_t size, unsigned seed) {
  std::string bytes(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char &c : bytes) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return bytes;
}

class RemoteSubmitTest : public ::testing::Test {
protected:
  void SetUp() override {
    cacheDir_ = dir_.file("cache");
    socket_ = dir_.file("flowcd.sock");
    ASSERT_EQ(flowc("daemon start"), 0);
    stub_ = v1::Compiler::NewStub(
        grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { flowc("daemon stop"); }

  /// Runs the CLI; its stdout in `out`.
  int flowc(const std::string &args, std::string *out = nullptr) {
    std::string stdoutPath = dir_.file("stdout");
    std::string command = std::string(FLOWC_BIN_DIR) + "/flowc --cache-dir '" +
                          cacheDir_ + "' --socket '" + socket_ + "' " + args + " >'" +
                          stdoutPath + "' 2>'" + dir_.file("stderr") + "'";
    int status = std::system(command.c_str());
    if (out)
      *out = readFileToString(stdoutPath).hasValue() ? *readFileToString(stdoutPath) : "";
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::vector<std::string> missing(const std::vector<std::string> &digests,
                                   grpc::Status *status = nullptr) {
    grpc::ClientContext context;
    v1::FindMissingBlobsRequest request;
    for (const std::string &digest : digests)
      request.add_digests(digest);
    v1::FindMissingBlobsResponse response;
    grpc::Status got = stub_->FindMissingBlobs(&context, request, &response);
    if (status)
      *status = got;
    return {response.missing().begin(), response.missing().end()};
  }

  v1::QueryUploadResponse query(const std::string &digest) {
    grpc::ClientContext context;
    v1::QueryUploadRequest request;
    request.set_digest(digest);
    v1::QueryUploadResponse response;
    EXPECT_TRUE(stub_->QueryUpload(&context, request, &response).ok());
    return response;
  }

  /// Sends `chunks` as one UploadBlob stream (the digest on the first);
  /// `finish` marks the last one.
  grpc::Status upload(const std::string &digest,
                      const std::vector<std::pair<uint64_t, std::string>> &chunks,
                      bool finish, uint64_t *committed = nullptr) {
    grpc::ClientContext context;
    v1::UploadBlobResponse response;
    auto writer = stub_->UploadBlob(&context, &response);
    for (size_t i = 0; i < chunks.size(); ++i) {
      v1::UploadChunk chunk;
      if (i == 0)
        chunk.set_digest(digest);
      chunk.set_offset(chunks[i].first);
      chunk.set_data(chunks[i].second);
      chunk.set_finish(finish && i + 1 == chunks.size());
      if (!writer->Write(chunk))
        break;
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (committed)
      *committed = response.committed_size();
    return status;
  }

  /// `bytes` split in `size` chunks from `from`, with their offsets.
  static std::vector<std::pair<uint64_t, std::string>>
  chunksOf(const std::string &bytes, size_t from = 0, size_t to = std::string::npos,
           size_t size = kMiB) {
    std::vector<std::pair<uint64_t, std::string>> chunks;
    to = std::min(to, bytes.size());
    for (size_t at = from; at < to || (at == 0 && to == 0); at += size) {
      chunks.emplace_back(at, bytes.substr(at, std::min(size, to - at)));
      if (to == 0)
        break;
    }
    return chunks;
  }

  grpc::Status submit(const v1::SubmitRequest &request) {
    grpc::ClientContext context;
    auto reader = stub_->Submit(&context, request);
    v1::SubmitEvent event;
    while (reader->Read(&event)) {
    }
    return reader->Finish();
  }

  v1::SubmitRequest
  manifest(const std::vector<std::pair<std::string, std::string>> &files) {
    v1::SubmitRequest request;
    request.mutable_options()->set_opt_level(2);
    for (const auto &[path, digest] : files) {
      v1::ModelFile *file = request.mutable_model()->add_files();
      file->set_path(path);
      file->set_digest(digest);
    }
    return request;
  }

  size_t partialFiles() {
    size_t count = 0;
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(cacheDir_ + "/uploads", ec))
      count += entry.is_regular_file() ? 1 : 0;
    return count;
  }

  TempDir dir_;
  std::string cacheDir_, socket_;
  std::unique_ptr<v1::Compiler::Stub> stub_;
};

TEST_F(RemoteSubmitTest, FindMissingBlobsNamesTheDigestItCannotParse) {
  std::string blob = digestOf("x");
  grpc::Status status;
  // A good digest is missing; the bad one is named with its position.
  EXPECT_EQ(missing({blob}), std::vector<std::string>{blob});
  missing({blob, "sha256:nothex/1"}, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("digests[1] 'sha256:nothex/1'"));
  // A request past the cap is refused as a whole.
  missing(std::vector<std::string>(10001, blob), &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("more than 10000"));
}

TEST_F(RemoteSubmitTest, AnUploadIsStoredOnlyWhenItsBytesMatchItsDigest) {
  std::string bytes = pattern(3 * kMiB + 17, 1);
  std::string digest = digestOf(bytes);
  // The same size, one byte different: DataLoss, and nothing stored or kept.
  std::string wrong = bytes;
  wrong[2 * kMiB + 5] ^= 1;
  grpc::Status status = upload(digest, chunksOf(wrong), /*finish=*/true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("hash to " + digestOf(wrong)));
  EXPECT_EQ(missing({digest}), std::vector<std::string>{digest});
  EXPECT_EQ(query(digest).committed_size(), 0u);
  EXPECT_EQ(partialFiles(), 0u);
  // The right bytes are stored, and then no longer missing.
  uint64_t committed = 0;
  status = upload(digest, chunksOf(bytes), /*finish=*/true, &committed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(committed, bytes.size());
  EXPECT_TRUE(missing({digest}).empty());
  EXPECT_TRUE(query(digest).complete());
  EXPECT_EQ(partialFiles(), 0u);
}

TEST_F(RemoteSubmitTest, ChunksOutOfOrderOrPastTheSizeAreRefused) {
  std::string bytes = pattern(2 * kMiB, 2);
  std::string digest = digestOf(bytes);
  // A gap.
  grpc::Status status = upload(
      digest, {{0, bytes.substr(0, kMiB)}, {kMiB + 1, bytes.substr(kMiB + 1)}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("chunks must be sent in order"));
  // More data than the digest's size.
  status = upload(digest, {{0, bytes + "x"}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // (the chunk is over 1 MiB too; a small blob tells the two apart)
  std::string small = "abc";
  status = upload(digestOf(small), {{0, small + "d"}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("data past the blob's size"));
  status = upload(digest, {{0, bytes}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("more than 1048576"));
  // Finished short of the size.
  status = upload(digest, {{0, bytes.substr(0, 100)}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("short of its size"));
  // A resume at an offset that is not the committed one.
  status = upload(digest, {{512, bytes.substr(512, 10)}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("resume at QueryUpload"));
  // A bad digest on the first chunk.
  status = upload("sha256:00/1", {{0, "x"}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("upload digest 'sha256:00/1'"));
  EXPECT_EQ(missing({digest}), std::vector<std::string>{digest});
  // No refused upload left a partial file.
  EXPECT_EQ(partialFiles(), 0u);
}

TEST_F(RemoteSubmitTest, AnInterruptedUploadResumesFromTheCommittedOffset) {
  std::string bytes = pattern(4 * kMiB + 3, 3);
  std::string digest = digestOf(bytes);
  // Two chunks, then the stream ends without `finish`: they are kept.
  uint64_t committed = 0;
  ASSERT_TRUE(upload(digest, chunksOf(bytes, 0, 2 * kMiB), false, &committed).ok());
  EXPECT_EQ(committed, 2 * kMiB);
  EXPECT_EQ(query(digest).committed_size(), 2 * kMiB);
  EXPECT_FALSE(query(digest).complete());
  EXPECT_EQ(missing({digest}), std::vector<std::string>{digest});
  // A size no disk holds (and that overflows a sum with anything) is
  // refused, and makes no room by dropping the kept upload.
  std::string huge = "sha256:" + std::string(64, 'a') + "/18446744073709551615";
  grpc::Status status = upload(huge, {{0, "x"}}, true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("unfinished uploads"));
  EXPECT_EQ(query(digest).committed_size(), 2 * kMiB);
  // A client that cancels mid-stream: whatever reached the daemon is kept
  // (a whole number of chunks), and the upload goes on from there.
  {
    grpc::ClientContext context;
    v1::UploadBlobResponse response;
    auto writer = stub_->UploadBlob(&context, &response);
    v1::UploadChunk chunk;
    chunk.set_digest(digest);
    chunk.set_offset(2 * kMiB);
    chunk.set_data(bytes.substr(2 * kMiB, kMiB));
    writer->Write(chunk);
    context.TryCancel();
    writer->Finish();
  }
  // The cancelled stream may still hold the upload for a moment (the
  // daemon sees the cancel when it reads next): resumed from whatever is
  // committed once it lets go.
  uint64_t kept = 0;
  grpc::Status resumed;
  for (int i = 0; i < 200; ++i) {
    kept = query(digest).committed_size();
    resumed = upload(digest, chunksOf(bytes, kept), true, &committed);
    if (resumed.error_code() != grpc::StatusCode::UNAVAILABLE &&
        resumed.error_code() != grpc::StatusCode::FAILED_PRECONDITION)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(kept == 2 * kMiB || kept == 3 * kMiB) << kept;
  ASSERT_TRUE(resumed.ok()) << resumed.error_message();
  EXPECT_EQ(committed, bytes.size());
  EXPECT_TRUE(missing({digest}).empty());
  EXPECT_EQ(partialFiles(), 0u);
}

TEST_F(RemoteSubmitTest, TheCliResumesAnUploadThatAnotherClientLeftHalfDone) {
  // A model of 3 MiB of inline weights, so that its .onnx is several chunks.
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {1, 786432}, std::vector<float>(786432, 0.5f))};
  spec.nodes = {node("Add", {"x", "W"}, {"y"}, "add")};
  spec.inputs = {valueInfo("x", {1, 786432})};
  spec.outputs = {valueInfo("y", {1, 786432})};
  std::string bytes = model(spec);
  std::string path = dir_.file("big.onnx");
  ASSERT_TRUE(writeFileAtomically(path, bytes).isOk());
  std::string digest = digestOf(bytes);
  ASSERT_TRUE(upload(digest, chunksOf(bytes, 0, kMiB), false).ok());
  ASSERT_EQ(query(digest).committed_size(), kMiB);
  // The CLI sends only the rest.
  std::string out;
  ASSERT_EQ(
      flowc("submit '" + path + "' -o '" + dir_.file("big.fca") + "' --upload --json",
            &out),
      0)
      << *readFileToString(dir_.file("stderr"));
  auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["uploaded_blobs"], 1);
  EXPECT_EQ(json["uploaded_bytes"], bytes.size() - kMiB);
  EXPECT_EQ(json["cache"], "miss");
}

TEST_F(RemoteSubmitTest, BadManifestsAreRefusedNamingTheFileAtFault) {
  std::string onnx = denseReluModel();
  std::string digest = digestOf(onnx);
  ASSERT_TRUE(upload(digest, chunksOf(onnx), true).ok());
  struct Case {
    std::vector<std::pair<std::string, std::string>> files;
    grpc::StatusCode code;
    std::string message;
  };
  std::string unknown = digestOf("never uploaded");
  std::vector<Case> cases = {
      {{{"m.onnx", unknown}}, grpc::StatusCode::FAILED_PRECONDITION, "upload it first"},
      {{{"m.onnx", digest}, {"w.bin", unknown}},
       grpc::StatusCode::FAILED_PRECONDITION,
       "model.files[1] 'w.bin' (" + unknown + ") is not in the daemon's cache"},
      {{{"m.onnx", digest}, {"../x", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "model.files[1].path '../x' escapes"},
      {{{"m.onnx", digest}, {"a/../../x", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "escapes"},
      {{{"m.onnx", digest}, {"/etc/passwd", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "'/etc/passwd' is absolute"},
      {{{"m.onnx", digest}, {"w.bin", digest}, {"w.bin", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "model.files[2].path 'w.bin' is listed twice"},
      {{{"m.onnx", digest}, {"m.onnx", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "listed twice"},
      {{{"m.onnx", digest}, {"", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "model.files[1].path is empty"},
      {{{"m.onnx", digest}, {"a//b", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "empty component"},
      {{{"m.onnx", digest}, {"./w", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "'.' component"},
      {{{"m.onnx", digest}, {"w", digest}, {"w/x", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "lies under 'w'"},
      {{{"sub/m.onnx", digest}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "without a directory"},
      {{{"m.onnx", "sha256:zz/1"}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "model.files[0].digest 'sha256:zz/1'"},
      {{}, grpc::StatusCode::INVALID_ARGUMENT, "no files"},
  };
  for (const Case &c : cases) {
    v1::SubmitRequest request = manifest(c.files);
    if (c.files.empty())
      request.mutable_model();
    grpc::Status status = submit(request);
    EXPECT_EQ(status.error_code(), c.code) << c.message << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), ::testing::HasSubstr(c.message));
  }
  // A path and a manifest at once.
  v1::SubmitRequest both = manifest({{"m.onnx", digest}});
  both.set_model_path(dir_.file("m.onnx"));
  grpc::Status status = submit(both);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("send one"));
  // No materialized directory is left behind by any of them.
  for (const auto &entry : fs::directory_iterator(cacheDir_ + "/tmp"))
    EXPECT_FALSE(entry.path().filename().string().starts_with("model.")) << entry.path();
  // The good manifest compiles.
  status = submit(manifest({{"m.onnx", digest}}));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

} // namespace
} // namespace flowc
