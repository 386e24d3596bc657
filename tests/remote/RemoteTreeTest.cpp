// The REAPI messages flowc builds for an action: canonical (order of the
// caller's lists does not matter), byte-identical to an independent
// encoding, and refused with a message naming the fault for bad actions.
#include "flowc/remote/ActionEncoding.h"
#include "flowc/remote/RemoteExecution.h"

#include "../common/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace flowc::remote {
namespace {

using flowc::testing::StatusIs;

// An independent protobuf wire encoder: just the three forms REAPI's
// messages use here. Proto3 leaves default values (0, false, "") out.
std::string varint(uint64_t value) {
  std::string out;
  do {
    uint8_t byte = value & 0x7f;
    value >>= 7;
    out += static_cast<char>(value ? byte | 0x80 : byte);
  } while (value);
  return out;
}
std::string bytesField(int number, std::string_view bytes) {
  if (bytes.empty())
    return "";
  return varint(uint64_t(number) << 3 | 2) + varint(bytes.size()) + std::string(bytes);
}
std::string messageField(int number, std::string_view bytes) {
  return varint(uint64_t(number) << 3 | 2) + varint(bytes.size()) + std::string(bytes);
}
std::string varintField(int number, uint64_t value) {
  if (value == 0)
    return "";
  return varint(uint64_t(number) << 3) + varint(value);
}
std::string digestBytes(const cache::Digest &digest) {
  return bytesField(1, digest.hex()) + varintField(2, digest.size);
}

InputFile input(std::string path, std::string_view bytes, bool executable = false) {
  return InputFile{std::move(path), cache::digestOf(bytes), executable, bytes};
}

// A compile task's shape: the worker binary, a task file and an IR.
Action sampleAction() {
  Action action;
  action.arguments = {"bin/flowc-worker", "--task", "task/t.json"};
  action.environment = {{"LANG", "C"}, {"A", "1"}};
  action.inputs = {input("task/t.json", "{}"),
                   input("bin/flowc-worker", "#!worker", true),
                   input("task/kernel.mlir", "module {}")};
  action.outputFiles = {"out/log.txt", "out/kernel.o"};
  action.platform = {{"OSFamily", "linux"}, {"ISA", "x86-64"}};
  action.timeout = std::chrono::seconds(60);
  return action;
}

TEST(ActionEncodingTest, MatchesDigestsComputedByBuildGridsMessages) {
  // Reference digests: the same action built with BuildGrid 0.9.1's
  // generated Python messages (remote_execution_pb2), serialized with
  // deterministic=True and hashed with hashlib.sha256.
  Expected<EncodedAction> encoded = encodeAction(sampleAction());
  ASSERT_TRUE(encoded) << encoded.status().toString();
  EXPECT_EQ(
      encoded->inputRootDigest.toString(),
      "sha256:844288f7f69c70a8c5c796c486584f5713c0f75dd45ebd953766957150bb1d7b/156");
  EXPECT_EQ(
      encoded->commandDigest.toString(),
      "sha256:5fc30780e16880cbe210eb2ae07ee14f1eda5d0c47ec83c01fac45c4421f3c01/148");
  EXPECT_EQ(
      encoded->actionDigest.toString(),
      "sha256:c4de537b6df57907931f60309103e383fff92590359da573e9cbf4f5d26d844b/182");
}

TEST(ActionEncodingTest, DirectoriesAreByteIdenticalToAHandEncoding) {
  // Two levels: root {b.txt, a/}, a {x.bin (executable), y}.
  Action action;
  action.arguments = {"true"};
  action.inputs = {input("b.txt", "B"), input("a/y", "Y"), input("a/x.bin", "X", true)};
  Expected<EncodedAction> encoded = encodeAction(action);
  ASSERT_TRUE(encoded) << encoded.status().toString();

  std::string subdir =
      messageField(1, bytesField(1, "x.bin") +
                          messageField(2, digestBytes(cache::digestOf("X"))) +
                          varintField(4, 1)) +
      messageField(1, bytesField(1, "y") +
                          messageField(2, digestBytes(cache::digestOf("Y"))));
  std::string root =
      messageField(1, bytesField(1, "b.txt") +
                          messageField(2, digestBytes(cache::digestOf("B")))) +
      messageField(2, bytesField(1, "a") +
                          messageField(2, digestBytes(cache::digestOf(subdir))));
  // Root first, then the subdirectory.
  ASSERT_EQ(encoded->directories.size(), 2u);
  EXPECT_EQ(encoded->directories[0], root);
  EXPECT_EQ(encoded->directories[1], subdir);
  EXPECT_EQ(encoded->inputRootDigest, cache::digestOf(root));
}

TEST(ActionEncodingTest, CommandAndActionAreByteIdenticalToAHandEncoding) {
  Action action;
  action.arguments = {"run", "x"};
  action.environment = {{"Z", "2"}, {"B", ""}};
  action.outputFiles = {"o2", "o1"};
  action.workingDirectory = "w";
  action.inputs = {input("w/in", "data")};
  action.platform = {{"k", "v"}};
  Expected<EncodedAction> encoded = encodeAction(action);
  ASSERT_TRUE(encoded) << encoded.status().toString();

  std::string platform = messageField(1, bytesField(1, "k") + bytesField(2, "v"));
  // Fields in number order: arguments (1), environment (2, sorted by
  // name), output_files (3, sorted), platform (5), working_directory (6),
  // output_paths (7, sorted).
  std::string command =
      bytesField(1, "run") + bytesField(1, "x") + messageField(2, bytesField(1, "B")) +
      messageField(2, bytesField(1, "Z") + bytesField(2, "2")) + bytesField(3, "o1") +
      bytesField(3, "o2") + messageField(5, platform) + bytesField(6, "w") +
      bytesField(7, "o1") + bytesField(7, "o2");
  EXPECT_EQ(encoded->command, command);
  // No timeout: field 6 absent; do_not_cache false: field 7 absent.
  std::string expectedAction = messageField(1, digestBytes(cache::digestOf(command))) +
                               messageField(2, digestBytes(encoded->inputRootDigest)) +
                               messageField(10, platform);
  EXPECT_EQ(encoded->action, expectedAction);
  EXPECT_EQ(encoded->actionDigest, cache::digestOf(expectedAction));
  // Outputs are reported in the caller's order.
  EXPECT_EQ(encoded->outputFiles, (std::vector<std::string>{"o2", "o1"}));
}

TEST(ActionEncodingTest, EmptyInputRootIsTheEmptyBlob) {
  Action action;
  action.arguments = {"true"};
  Expected<EncodedAction> encoded = encodeAction(action);
  ASSERT_TRUE(encoded) << encoded.status().toString();
  // SHA-256 of no bytes, the digest every REAPI CAS holds implicitly.
  EXPECT_EQ(encoded->inputRootDigest.toString(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/0");
}

TEST(ActionEncodingTest, OrderOfTheCallersListsDoesNotChangeTheDigest) {
  // Reverse every list the client sorts: the action digest is the same.
  Action action = sampleAction();
  Action reversed = action;
  std::reverse(reversed.environment.begin(), reversed.environment.end());
  std::reverse(reversed.inputs.begin(), reversed.inputs.end());
  std::reverse(reversed.outputFiles.begin(), reversed.outputFiles.end());
  std::reverse(reversed.platform.begin(), reversed.platform.end());
  Expected<EncodedAction> a = encodeAction(action);
  Expected<EncodedAction> b = encodeAction(reversed);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->actionDigest, b->actionDigest);
}

TEST(ActionEncodingTest, EveryMeaningfulChangeChangesTheDigest) {
  Expected<EncodedAction> base = encodeAction(sampleAction());
  ASSERT_TRUE(base);
  std::vector<std::pair<const char *, void (*)(Action &)>> changes = {
      {"executable bit", [](Action &a) { a.inputs[0].executable = true; }},
      {"input bytes",
       [](Action &a) { a.inputs[2] = input("task/kernel.mlir", "module{}"); }},
      {"argument", [](Action &a) { a.arguments.push_back("-v"); }},
      {"environment", [](Action &a) { a.environment[0].second = "en_US"; }},
      {"output", [](Action &a) { a.outputFiles.push_back("out/extra"); }},
      {"platform", [](Action &a) { a.platform[1].second = "aarch64"; }},
      {"timeout", [](Action &a) { a.timeout = std::chrono::seconds(61); }},
      {"working directory", [](Action &a) { a.workingDirectory = "task"; }},
  };
  for (const auto &[what, change] : changes) {
    Action action = sampleAction();
    change(action);
    Expected<EncodedAction> changed = encodeAction(action);
    ASSERT_TRUE(changed) << what << ": " << changed.status().toString();
    EXPECT_NE(changed->actionDigest, base->actionDigest) << what;
  }
}

TEST(ActionEncodingTest, BlobsListEachDigestOnce) {
  // Two inputs with the same bytes and two identical subdirectories: one
  // blob each, plus the Action, the Command and the root.
  Action action;
  action.arguments = {"true"};
  action.inputs = {input("a/f", "same"), input("b/f", "same")};
  Expected<EncodedAction> encoded = encodeAction(action);
  ASSERT_TRUE(encoded);
  std::vector<BlobRef> blobs = encoded->blobs(action);
  // Action, Command, root, the shared subdirectory, the shared file.
  ASSERT_EQ(blobs.size(), 5u);
  for (const BlobRef &blob : blobs)
    EXPECT_EQ(cache::digestOf(blob.bytes), blob.digest);
}

struct BadAction {
  const char *name;
  void (*change)(Action &);
  const char *message;
};

TEST(ActionEncodingTest, BadActionsAreRefusedNamingTheFault) {
  const BadAction cases[] = {
      {"no arguments", [](Action &a) { a.arguments.clear(); }, "has no arguments"},
      {"empty program", [](Action &a) { a.arguments[0].clear(); },
       "program (arguments[0]) is empty"},
      {"NUL argument", [](Action &a) { a.arguments[1] = std::string("a\0b", 3); },
       "argument 1 'a\\x00b': holds a NUL byte"},
      {"bad UTF-8", [](Action &a) { a.arguments[1] = "\xff\xfe"; }, "not valid UTF-8"},
      {"overlong UTF-8", [](Action &a) { a.arguments[1] = "\xc0\xaf"; },
       "not valid UTF-8"},
      {"absolute input", [](Action &a) { a.inputs[0].path = "/etc/passwd"; },
       "input path '/etc/passwd': absolute"},
      {"dot-dot input", [](Action &a) { a.inputs[0].path = "task/../../x"; },
       "input path 'task/../../x': '..' segment"},
      {"dot input", [](Action &a) { a.inputs[0].path = "./x"; }, "'.' segment"},
      {"empty segment", [](Action &a) { a.inputs[0].path = "task//t.json"; },
       "input path 'task//t.json': empty segment"},
      {"trailing slash", [](Action &a) { a.inputs[0].path = "task/"; }, "empty segment"},
      {"empty input path", [](Action &a) { a.inputs[0].path.clear(); },
       "input path is empty"},
      {"duplicate input", [](Action &a) { a.inputs.push_back(a.inputs[0]); },
       "input path 'task/t.json': given twice"},
      {"file and directory",
       [](Action &a) { a.inputs.push_back(input("task/t.json/inner", "x")); },
       "'task/t.json' is also an input file"},
      {"directory and file", [](Action &a) { a.inputs.push_back(input("task", "x")); },
       "input path 'task': also a directory of other inputs"},
      {"size mismatch", [](Action &a) { a.inputs[0].bytes = "{}{}"; },
       "input path 'task/t.json': 4 bytes, but digest"},
      {"env with =",
       [](Action &a) {
         a.environment.push_back({"A=B", "x"});
       },
       "environment name 'A=B': holds '='"},
      {"empty env name",
       [](Action &a) {
         a.environment.push_back({"", "x"});
       },
       "environment name is empty"},
      {"duplicate env",
       [](Action &a) {
         a.environment.push_back({"LANG", "D"});
       },
       "environment name 'LANG': given twice"},
      {"empty platform name",
       [](Action &a) {
         a.platform.push_back({"", "x"});
       },
       "platform property name is empty"},
      {"duplicate platform",
       [](Action &a) {
         a.platform.push_back({"ISA", "x86-64"});
       },
       "platform property 'ISA'='x86-64': given twice"},
      {"absolute output", [](Action &a) { a.outputFiles.push_back("/tmp/o"); },
       "output path '/tmp/o': absolute"},
      {"duplicate output", [](Action &a) { a.outputFiles.push_back("out/log.txt"); },
       "output path 'out/log.txt': given twice"},
      {"output parent", [](Action &a) { a.outputFiles.push_back("out"); },
       "output path 'out': a parent of output 'out/kernel.o'"},
      {"negative timeout", [](Action &a) { a.timeout = std::chrono::seconds(-1); },
       "timeout -1 s is negative"},
      {"missing working directory", [](Action &a) { a.workingDirectory = "nowhere"; },
       "working directory 'nowhere': not a directory of the input root"},
      {"working directory is a file",
       [](Action &a) { a.workingDirectory = "task/t.json"; },
       "not a directory of the input root"},
      {"escaping working directory", [](Action &a) { a.workingDirectory = ".."; },
       "working directory '..': '..' segment"},
  };
  for (const BadAction &bad : cases) {
    Action action = sampleAction();
    bad.change(action);
    EXPECT_THAT(encodeAction(action), StatusIs(StatusCode::InvalidArgument, bad.message))
        << bad.name;
  }
}

TEST(EndpointTest, AcceptsPlaintextTlsIpv6AndInstances) {
  Expected<Endpoint> plain = parseEndpoint("grpc://localhost:8980", "");
  ASSERT_TRUE(plain) << plain.status().toString();
  EXPECT_EQ(plain->url, "grpc://localhost:8980");
  EXPECT_EQ(plain->instance, "");
  Expected<Endpoint> tls = parseEndpoint("grpcs://remote.buildbuddy.io:443", "main/ci");
  ASSERT_TRUE(tls) << tls.status().toString();
  EXPECT_EQ(tls->instance, "main/ci");
  EXPECT_TRUE(parseEndpoint("grpc://[::1]:50051", ""));
  EXPECT_TRUE(parseEndpoint("grpc://10.0.0.7:1", "x"));
}

TEST(EndpointTest, BadUrlsAreRefusedNamingThePart) {
  const std::pair<const char *, const char *> cases[] = {
      {"http://host:80", "scheme must be grpc:// or grpcs://"},
      {"host:80", "scheme must be grpc:// or grpcs://"},
      {"", "scheme must be grpc:// or grpcs://"},
      {"grpc://", "no host"},
      {"grpc://:80", "no host"},
      {"grpc://host", "no port"},
      {"grpc://host:", "port must be a number in 1..65535"},
      {"grpc://host:0", "port must be a number in 1..65535"},
      {"grpc://host:65536", "port must be a number in 1..65535"},
      {"grpc://host:99999999999999999999", "port must be a number in 1..65535"},
      {"grpc://host:-1", "port must be a number in 1..65535"},
      {"grpc://host:80x", "unexpected text after the port"},
      {"grpc://host:80/path", "unexpected text after the port"},
      {"grpc://user@host:80", "unexpected '@' after the host"},
      {"grpc://host/x:80", "unexpected '/' after the host"},
      {"grpc://ho st:80", "unexpected ' ' after the host"},
      {"grpc://[::1:80", "IPv6 address without ']'"},
      {"grpc://[]:80", "malformed IPv6 address"},
      {"grpc://[zz]:80", "malformed IPv6 address"},
  };
  for (const auto &[url, message] : cases) {
    Expected<Endpoint> endpoint = parseEndpoint(url, "");
    EXPECT_THAT(endpoint, StatusIs(StatusCode::InvalidArgument, message)) << url;
    EXPECT_THAT(endpoint, StatusIs(StatusCode::InvalidArgument,
                                   "remote executor URL '" + std::string(url) + "'"));
  }
}

TEST(EndpointTest, BadInstanceNamesAreRefusedNamingTheSegment) {
  const std::pair<std::string, const char *> cases[] = {
      {"/main", "empty segment"},
      {"main/", "empty segment"},
      {"a//b", "empty segment"},
      {"..", "'..' segment"},
      {"a/./b", "'.' segment"},
      {"blobs", "segment 'blobs' is reserved"},
      {"main/uploads", "segment 'uploads' is reserved"},
      {"a\nb", "control or non-ASCII byte"},
      {std::string(1025, 'a'), "longer than 1024 bytes"},
  };
  for (const auto &[instance, message] : cases)
    EXPECT_THAT(parseEndpoint("grpc://host:1", instance),
                StatusIs(StatusCode::InvalidArgument, message))
        << instance;
}

TEST(RemoteExecutorTest, ConnectRefusesBadEndpointsAndCertificates) {
  // connect() checks what parseEndpoint checks, for hand-built endpoints.
  EXPECT_THAT(RemoteExecutor::connect(Endpoint{"grpc://host", "", ""}),
              StatusIs(StatusCode::InvalidArgument, "no port"));
  EXPECT_THAT(RemoteExecutor::connect(Endpoint{"grpcs://host:1", "", "/nonexistent.pem"}),
              StatusIs(StatusCode::InvalidArgument,
                       "remote root certificates '/nonexistent.pem': cannot be read"));
  EXPECT_THAT(RemoteExecutor::connect(Endpoint{"grpc://host:1", "", "/etc/hostname"}),
              StatusIs(StatusCode::InvalidArgument, "given for the plaintext endpoint"));
  ClientOptions options;
  options.resumeWindow = std::chrono::seconds(-1);
  EXPECT_THAT(RemoteExecutor::connect(Endpoint{"grpc://host:1", "", ""}, options),
              StatusIs(StatusCode::InvalidArgument,
                       "remote resume window -1 s: must be 0..3600 s"));
  // No RPC at connect: an unreachable endpoint connects.
  Expected<std::unique_ptr<RemoteExecutor>> executor =
      RemoteExecutor::connect(Endpoint{"grpc://127.0.0.1:1", "", ""});
  ASSERT_TRUE(executor) << executor.status().toString();
  EXPECT_EQ((*executor)->endpoint().url, "grpc://127.0.0.1:1");
}

TEST(RemoteExecutorTest, UnreachableEngineIsUnavailableNamingIt) {
  // Port 1 on loopback: nothing listens; the connection is refused.
  Expected<std::unique_ptr<RemoteExecutor>> executor =
      RemoteExecutor::connect(Endpoint{"grpc://127.0.0.1:1", "ci", ""});
  ASSERT_TRUE(executor);
  EXPECT_THAT(
      (*executor)->checkCapabilities(),
      StatusIs(StatusCode::Unavailable,
               "GetCapabilities on grpc://127.0.0.1:1 (instance 'ci'): UNAVAILABLE"));
  EXPECT_THAT((*executor)->execute(sampleAction()),
              StatusIs(StatusCode::Unavailable, "on grpc://127.0.0.1:1 (instance 'ci')"));
  // A bad action is refused before any RPC.
  Action bad = sampleAction();
  bad.arguments.clear();
  EXPECT_THAT((*executor)->execute(bad),
              StatusIs(StatusCode::InvalidArgument, "no arguments"));
}

} // namespace
} // namespace flowc::remote
