#include "flowc/remote/ActionEncoding.h"

#include "ProtoDigest.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <map>
#include <set>

namespace flowc::remote {

Expected<cache::Digest> fromProto(const reapi::Digest &proto, const std::string &what) {
  std::optional<Sha256> hash = parseSha256Hex(proto.hash());
  if (!hash || proto.size_bytes() < 0)
    return dataLoss(what + ": malformed digest '" + proto.hash().substr(0, 80) + "/" +
                    std::to_string(proto.size_bytes()) + "'");
  return cache::Digest{*hash, static_cast<uint64_t>(proto.size_bytes())};
}

std::string serializeCanonical(const google::protobuf::MessageLite &message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

namespace {

// Proto3 string fields must hold UTF-8; an engine written in another
// language refuses a message that does not parse.
bool isValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    size_t length = byte < 0x80           ? 1
                    : (byte >> 5) == 0x6  ? 2
                    : (byte >> 4) == 0xe  ? 3
                    : (byte >> 3) == 0x1e ? 4
                                          : 0;
    if (length == 0 || i + length > text.size())
      return false;
    uint32_t codePoint = length == 1 ? byte : byte & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80)
        return false;
      codePoint = (codePoint << 6) | (next & 0x3f);
    }
    static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (codePoint < kSmallest[length] || codePoint > 0x10ffff ||
        (codePoint >= 0xd800 && codePoint <= 0xdfff))
      return false;
    i += length;
  }
  return true;
}

std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 200)) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
      continue;
    }
    out += c;
  }
  return out + (text.size() > 200 ? "...'" : "'");
}

Status checkText(const std::string &what, std::string_view text) {
  if (text.find('\0') != std::string_view::npos)
    return invalidArgument(what + " " + quoted(text) + ": holds a NUL byte");
  if (!isValidUtf8(text))
    return invalidArgument(what + " " + quoted(text) + ": not valid UTF-8");
  return Status::ok();
}

// A relative, '/'-separated path naming something inside the input root:
// no leading or trailing '/', no empty, "." or ".." segment.
Status checkRelativePath(const std::string &what, std::string_view path) {
  FLOWC_RETURN_IF_ERROR(checkText(what, path));
  if (path.empty())
    return invalidArgument(what + " is empty");
  if (path.front() == '/')
    return invalidArgument(what + " " + quoted(path) + ": absolute (must be relative)");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string_view segment = path.substr(start, end - start);
    if (segment.empty())
      return invalidArgument(what + " " + quoted(path) + ": empty segment");
    if (segment == "." || segment == "..")
      return invalidArgument(what + " " + quoted(path) + ": '" + std::string(segment) +
                             "' segment");
    start = end + 1;
  }
  return Status::ok();
}

std::vector<std::string> splitPath(std::string_view path) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    segments.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return segments;
}

// The input root as a tree. std::map orders names as REAPI wants: by
// bytes (char_traits compares as unsigned char), which for UTF-8 is code
// point order.
struct TreeNode {
  std::map<std::string, TreeNode> directories;
  std::map<std::string, const InputFile *> files;
};

Status insertFile(TreeNode &root, const InputFile &file) {
  std::vector<std::string> segments = splitPath(file.path);
  TreeNode *node = &root;
  std::string prefix;
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    prefix += (i ? "/" : "") + segments[i];
    if (node->files.count(segments[i]))
      return invalidArgument("input path " + quoted(file.path) + ": " + quoted(prefix) +
                             " is also an input file");
    node = &node->directories[segments[i]];
  }
  const std::string &name = segments.back();
  if (node->directories.count(name))
    return invalidArgument("input path " + quoted(file.path) +
                           ": also a directory of other inputs");
  if (!node->files.emplace(name, &file).second)
    return invalidArgument("input path " + quoted(file.path) + ": given twice");
  return Status::ok();
}

// Serializes `node` and its subdirectories, children before parents;
// returns the node's digest.
cache::Digest encodeTree(const TreeNode &node, EncodedAction &out) {
  reapi::Directory directory;
  for (const auto &[name, file] : node.files) {
    reapi::FileNode *entry = directory.add_files();
    entry->set_name(name);
    *entry->mutable_digest() = toProto(file->digest);
    entry->set_is_executable(file->executable);
  }
  for (const auto &[name, child] : node.directories) {
    reapi::DirectoryNode *entry = directory.add_directories();
    entry->set_name(name);
    *entry->mutable_digest() = toProto(encodeTree(child, out));
  }
  std::string bytes = serializeCanonical(directory);
  cache::Digest digest = cache::digestOf(bytes);
  out.directories.push_back(std::move(bytes));
  out.directoryDigests.push_back(digest);
  return digest;
}

bool isDirectoryOf(const TreeNode &root, std::string_view path) {
  if (path.empty())
    return true;
  const TreeNode *node = &root;
  for (const std::string &segment : splitPath(path)) {
    auto it = node->directories.find(segment);
    if (it == node->directories.end())
      return false;
    node = &it->second;
  }
  return true;
}

Status checkOutputs(const std::vector<std::string> &outputs) {
  std::set<std::string> seen;
  for (const std::string &path : outputs) {
    FLOWC_RETURN_IF_ERROR(checkRelativePath("output path", path));
    if (!seen.insert(path).second)
      return invalidArgument("output path " + quoted(path) + ": given twice");
  }
  // In sorted order the paths that start with a given path follow it
  // contiguously, so each path is checked against that run only.
  for (auto it = seen.begin(); it != seen.end(); ++it) {
    for (auto next = std::next(it); next != seen.end() && next->starts_with(*it);
         ++next) {
      if ((*next)[it->size()] == '/')
        return invalidArgument("output path " + quoted(*it) + ": a parent of output " +
                               quoted(*next));
    }
  }
  return Status::ok();
}

Status checkEnvironment(const std::vector<std::pair<std::string, std::string>> &env) {
  std::set<std::string> names;
  for (const auto &[name, value] : env) {
    FLOWC_RETURN_IF_ERROR(checkText("environment name", name));
    FLOWC_RETURN_IF_ERROR(checkText("environment value of " + quoted(name), value));
    if (name.empty())
      return invalidArgument("environment name is empty");
    if (name.find('=') != std::string::npos)
      return invalidArgument("environment name " + quoted(name) + ": holds '='");
    if (!names.insert(name).second)
      return invalidArgument("environment name " + quoted(name) + ": given twice");
  }
  return Status::ok();
}

Status checkPlatform(const std::vector<std::pair<std::string, std::string>> &platform) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto &property : platform) {
    FLOWC_RETURN_IF_ERROR(checkText("platform property name", property.first));
    FLOWC_RETURN_IF_ERROR(checkText(
        "platform property " + quoted(property.first) + " value", property.second));
    if (property.first.empty())
      return invalidArgument("platform property name is empty");
    if (!seen.insert(property).second)
      return invalidArgument("platform property " + quoted(property.first) + "=" +
                             quoted(property.second) + ": given twice");
  }
  return Status::ok();
}

reapi::Platform
encodePlatform(std::vector<std::pair<std::string, std::string>> properties) {
  std::sort(properties.begin(), properties.end());
  reapi::Platform platform;
  for (const auto &[name, value] : properties) {
    reapi::Platform::Property *property = platform.add_properties();
    property->set_name(name);
    property->set_value(value);
  }
  return platform;
}

} // namespace

Expected<EncodedAction> encodeAction(const Action &action) {
  if (action.arguments.empty())
    return invalidArgument("action has no arguments (arguments[0] is the program)");
  if (action.arguments.front().empty())
    return invalidArgument("action's program (arguments[0]) is empty");
  for (size_t i = 0; i < action.arguments.size(); ++i)
    FLOWC_RETURN_IF_ERROR(
        checkText("argument " + std::to_string(i), action.arguments[i]));
  FLOWC_RETURN_IF_ERROR(checkEnvironment(action.environment));
  FLOWC_RETURN_IF_ERROR(checkPlatform(action.platform));
  FLOWC_RETURN_IF_ERROR(checkOutputs(action.outputFiles));
  if (action.timeout.count() < 0)
    return invalidArgument("action timeout " + std::to_string(action.timeout.count()) +
                           " s is negative");

  TreeNode root;
  for (const InputFile &file : action.inputs) {
    FLOWC_RETURN_IF_ERROR(checkRelativePath("input path", file.path));
    if (file.bytes.size() != file.digest.size)
      return invalidArgument("input path " + quoted(file.path) + ": " +
                             std::to_string(file.bytes.size()) + " bytes, but digest " +
                             file.digest.toString() + " says " +
                             std::to_string(file.digest.size));
    FLOWC_RETURN_IF_ERROR(insertFile(root, file));
  }
  if (!action.workingDirectory.empty()) {
    FLOWC_RETURN_IF_ERROR(
        checkRelativePath("working directory", action.workingDirectory));
    if (!isDirectoryOf(root, action.workingDirectory))
      return invalidArgument("working directory " + quoted(action.workingDirectory) +
                             ": not a directory of the input root");
  }

  EncodedAction out;
  out.inputRootDigest = encodeTree(root, out);
  // Root first: it was serialized last.
  std::rotate(out.directories.rbegin(), out.directories.rbegin() + 1,
              out.directories.rend());
  std::rotate(out.directoryDigests.rbegin(), out.directoryDigests.rbegin() + 1,
              out.directoryDigests.rend());

  reapi::Platform platform = encodePlatform(action.platform);
  std::vector<std::pair<std::string, std::string>> environment = action.environment;
  std::sort(environment.begin(), environment.end());
  std::vector<std::string> outputs = action.outputFiles;
  std::sort(outputs.begin(), outputs.end());

  reapi::Command command;
  for (const std::string &argument : action.arguments)
    command.add_arguments(argument);
  for (const auto &[name, value] : environment) {
    reapi::Command::EnvironmentVariable *variable = command.add_environment_variables();
    variable->set_name(name);
    variable->set_value(value);
  }
  // Both output lists: v2.1+ workers read output_paths, older ones
  // output_files; all outputs are files, so the two agree.
  for (const std::string &path : outputs) {
    command.add_output_files(path);
    command.add_output_paths(path);
  }
  if (platform.properties_size() > 0)
    *command.mutable_platform() = platform;
  command.set_working_directory(action.workingDirectory);
  out.command = serializeCanonical(command);
  out.commandDigest = cache::digestOf(out.command);

  reapi::Action message;
  *message.mutable_command_digest() = toProto(out.commandDigest);
  *message.mutable_input_root_digest() = toProto(out.inputRootDigest);
  if (action.timeout.count() > 0)
    message.mutable_timeout()->set_seconds(action.timeout.count());
  if (platform.properties_size() > 0)
    *message.mutable_platform() = platform;
  out.action = serializeCanonical(message);
  out.actionDigest = cache::digestOf(out.action);
  out.outputFiles = action.outputFiles;
  return out;
}

std::vector<BlobRef> EncodedAction::blobs(const Action &source) const {
  std::vector<BlobRef> all;
  std::set<std::pair<Sha256, uint64_t>> seen;
  auto add = [&](const cache::Digest &digest, std::string_view bytes) {
    if (seen.emplace(digest.hash, digest.size).second)
      all.push_back(BlobRef{digest, bytes});
  };
  add(actionDigest, action);
  add(commandDigest, command);
  for (size_t i = 0; i < directories.size(); ++i)
    add(directoryDigests[i], directories[i]);
  for (const InputFile &file : source.inputs)
    add(file.digest, file.bytes);
  return all;
}

} // namespace flowc::remote
