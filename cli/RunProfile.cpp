#include "RunProfile.h"

#include "flowc/support/Target.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace flowc::cli {

namespace {

using nlohmann::json;

/// One graph node as the artifact's metadata describes it; fields that are
/// missing or of the wrong type (the artifact is untrusted) read as empty.
struct NodeInfo {
  std::string name;
  std::string op;
  uint64_t flops = 0;
  std::vector<std::pair<std::string, uint64_t>> reads, writes;
};

std::vector<std::pair<std::string, uint64_t>> tensorsOf(const json &node,
                                                        const char *key) {
  std::vector<std::pair<std::string, uint64_t>> tensors;
  auto list = node.find(key);
  if (list == node.end() || !list->is_array())
    return tensors;
  for (const json &tensor : *list)
    if (tensor.is_array() && tensor.size() == 2 && tensor[0].is_string() &&
        tensor[1].is_number_unsigned())
      tensors.emplace_back(tensor[0].get<std::string>(), tensor[1].get<uint64_t>());
  return tensors;
}

std::vector<NodeInfo> nodesOf(const json &metadata) {
  std::vector<NodeInfo> nodes;
  auto list = metadata.find("nodes");
  if (list == metadata.end() || !list->is_array())
    return nodes;
  for (const json &node : *list) {
    NodeInfo info;
    auto text = [&](const char *key) {
      auto found = node.find(key);
      return found != node.end() && found->is_string() ? found->get<std::string>()
                                                       : std::string();
    };
    if (node.is_object()) {
      info.name = text("name");
      info.op = text("op");
      if (auto flops = node.find("flops");
          flops != node.end() && flops->is_number_unsigned())
        info.flops = flops->get<uint64_t>();
      info.reads = tensorsOf(node, "in");
      info.writes = tensorsOf(node, "out");
    }
    nodes.push_back(std::move(info));
  }
  return nodes;
}

/// What a kernel call moves to and from memory: the tensors its nodes read
/// that none of them wrote (weights included), and the tensors they write
/// that a node outside the call reads, or that are graph outputs, or that
/// no node reads. Tensors passed between its own nodes stay in registers.
uint64_t boundaryBytes(const std::vector<int32_t> &call,
                       const std::vector<NodeInfo> &nodes,
                       const std::map<std::string, std::set<int32_t>> &readers,
                       const std::set<std::string> &outputs) {
  std::set<int32_t> members;
  std::set<std::string> written;
  for (int32_t node : call)
    if (static_cast<size_t>(node) < nodes.size()) {
      members.insert(node);
      for (const auto &[name, bytes] : nodes[node].writes)
        written.insert(name);
    }
  uint64_t total = 0;
  std::set<std::string> counted;
  for (int32_t node : members) {
    for (const auto &[name, bytes] : nodes[node].reads)
      if (!written.count(name) && counted.insert(name).second)
        total += bytes;
    for (const auto &[name, bytes] : nodes[node].writes) {
      auto found = readers.find(name);
      bool leaves = outputs.count(name) || found == readers.end() ||
                    std::any_of(found->second.begin(), found->second.end(),
                                [&](int32_t reader) { return !members.count(reader); });
      if (leaves && counted.insert(name).second)
        total += bytes;
    }
  }
  return total;
}

/// Per second, in billions; 0 when nothing was timed.
double ratePerSecond(double amount, double seconds) {
  return seconds > 0 ? amount / seconds / 1e9 : 0;
}

/// The op a call is filed under: its costliest node's (the first on ties).
std::string leadingOp(const std::vector<int32_t> &call,
                      const std::vector<NodeInfo> &nodes) {
  const NodeInfo *leading = nullptr;
  for (int32_t node : call)
    if (static_cast<size_t>(node) < nodes.size() &&
        (!leading || nodes[node].flops > leading->flops))
      leading = &nodes[node];
  return leading && !leading->op.empty() ? leading->op : "?";
}

struct Sum {
  double seconds = 0;
  uint64_t calls = 0;
  uint64_t flops = 0;
};

json sumsJson(const std::map<std::string, Sum> &sums, const char *key, uint64_t runs,
              double runSeconds) {
  std::vector<std::pair<std::string, Sum>> sorted(sums.begin(), sums.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  json list = json::array();
  for (const auto &[name, sum] : sorted) {
    double perRun = sum.seconds / static_cast<double>(runs);
    list.push_back({{key, name},
                    {"ms", perRun * 1e3},
                    {"share", runSeconds > 0 ? perRun / runSeconds : 0},
                    {"calls_per_run", sum.calls / runs},
                    {"gflops", ratePerSecond(static_cast<double>(sum.flops), perRun)}});
  }
  return list;
}

} // namespace

json profileJson(const runtime::RunProfile &before, const runtime::RunProfile &after,
                 const json &metadata, const runtime::Plan &plan, int threads) {
  uint64_t runs = std::max<uint64_t>(after.runs - before.runs, 1);
  double runSeconds = (after.seconds - before.seconds) / static_cast<double>(runs);
  std::vector<NodeInfo> nodes = nodesOf(metadata);
  std::map<std::string, std::set<int32_t>> readers;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto &[name, bytes] : nodes[i].reads)
      readers[name].insert(static_cast<int32_t>(i));
  std::set<std::string> outputs;
  for (const runtime::TensorSpec &output : plan.outputs)
    outputs.insert(output.name);

  // A node lowered into several calls (a reduction in two loops) has its
  // FLOPs shared among them, so that the sums stay the graph's.
  std::map<int32_t, uint64_t> callsOfNode;
  for (const runtime::KernelCallTiming &call : after.calls)
    for (int32_t node : call.nodes)
      ++callsOfNode[node];
  json calls = json::array();
  std::map<std::string, Sum> byKind, byOp;
  double kernelSeconds = 0;
  for (size_t i = 0; i < after.calls.size(); ++i) {
    const runtime::KernelCallTiming &call = after.calls[i];
    double seconds =
        call.seconds - (i < before.calls.size() ? before.calls[i].seconds : 0);
    uint64_t count = call.calls - (i < before.calls.size() ? before.calls[i].calls : 0);
    double perRun = seconds / static_cast<double>(runs);
    kernelSeconds += perRun;
    uint64_t flops = 0;
    json names = json::array(), ops = json::array();
    for (int32_t node : call.nodes) {
      if (static_cast<size_t>(node) >= nodes.size())
        continue;
      flops += nodes[node].flops / callsOfNode[node];
      names.push_back(nodes[node].name);
      ops.push_back(nodes[node].op);
    }
    // The call's own buffers; code compiled before they were counted has
    // only its nodes' tensors, which a node split into several calls
    // credits to each of them in full.
    uint64_t bytes =
        call.bytes ? *call.bytes : boundaryBytes(call.nodes, nodes, readers, outputs);
    json entry = {{"call", i},
                  {"kernel", call.kernel},
                  {"kind", call.kind},
                  {"implementation", call.implementation},
                  {"calls_per_run", count / runs},
                  {"ms", perRun * 1e3},
                  {"share", runSeconds > 0 ? perRun / runSeconds : 0},
                  {"flops", flops},
                  {"gflops", ratePerSecond(static_cast<double>(flops), perRun)},
                  {"bytes", bytes},
                  {"gbps", ratePerSecond(static_cast<double>(bytes), perRun)},
                  {"nodes", call.nodes},
                  {"node_names", std::move(names)},
                  {"ops", std::move(ops)}};
    if (call.site >= 0)
      entry["site"] = call.site;
    calls.push_back(std::move(entry));
    for (Sum *sum : {&byKind[call.kind], &byOp[leadingOp(call.nodes, nodes)]}) {
      sum->seconds += seconds;
      sum->calls += count;
      sum->flops += flops * (count / runs);
    }
  }
  std::sort(calls.begin(), calls.end(), [](const json &a, const json &b) {
    return a["ms"].get<double>() > b["ms"].get<double>();
  });
  return {{"runs", runs},
          {"threads", threads},
          {"cpu", hostCpuDescription()},
          {"run_ms", runSeconds * 1e3},
          {"kernel_ms", kernelSeconds * 1e3},
          // Glue in the graph function between kernels, and the marks.
          {"outside_kernels_ms", std::max(0.0, runSeconds - kernelSeconds) * 1e3},
          {"named_nodes", !nodes.empty()},
          {"calls", std::move(calls)},
          {"by_kind", sumsJson(byKind, "kind", runs, runSeconds)},
          {"by_op", sumsJson(byOp, "op", runs, runSeconds)}};
}

namespace {

/// "conv2d site 3" or "loops 1f2e3d4c" (a loop kernel's hash, shortened).
std::string callName(const json &call) {
  if (call.contains("site"))
    return call["kind"].get<std::string>() + " site " +
           std::to_string(call["site"].get<int64_t>());
  std::string kernel = call["kernel"].get<std::string>();
  std::string hash = kernel.substr(kernel.rfind('_') + 1);
  return "loops " + hash.substr(0, 8);
}

/// The first node's name, then the ops of the rest: "/layer1/conv/Conv +Relu".
std::string nodesText(const json &call) {
  const json &names = call["node_names"];
  const json &ops = call["ops"];
  if (names.empty())
    return call["nodes"].empty() ? "-" : "nodes " + call["nodes"].dump();
  std::string text = names[0].get<std::string>();
  if (text.empty())
    text = ops[0].get<std::string>();
  for (size_t i = 1; i < ops.size() && i < 6; ++i)
    text += " +" + ops[i].get<std::string>();
  if (ops.size() > 6)
    text += " (+" + std::to_string(ops.size() - 6) + ")";
  return text.size() > 90 ? text.substr(0, 87) + "..." : text;
}

void printSums(const json &sums, const char *key, const char *title, std::ostream &out) {
  out << title << "\n";
  char line[160];
  for (const json &sum : sums) {
    std::snprintf(line, sizeof line,
                  "  %6.1f%%  %9.3f ms  %5llu calls  %8.1f GFLOP/s  %s\n",
                  sum["share"].get<double>() * 100, sum["ms"].get<double>(),
                  static_cast<unsigned long long>(sum["calls_per_run"].get<uint64_t>()),
                  sum["gflops"].get<double>(), sum[key].get<std::string>().c_str());
    out << line;
  }
}

} // namespace

void printProfile(const json &profile, size_t top, std::ostream &out) {
  double runMs = profile["run_ms"].get<double>();
  double kernelMs = profile["kernel_ms"].get<double>();
  int threadCount = profile["threads"].get<int>();
  std::string threads = threadCount > 0 ? std::to_string(threadCount) : "default";
  char line[512];
  std::snprintf(line, sizeof line,
                "profile: %llu runs, %s threads, %s\n"
                "per run %.3f ms: kernels %.3f ms (%.1f%%), outside kernels %.3f ms\n",
                static_cast<unsigned long long>(profile["runs"].get<uint64_t>()),
                threads.c_str(), profile["cpu"].get<std::string>().c_str(), runMs,
                kernelMs, runMs > 0 ? kernelMs / runMs * 100 : 0,
                profile["outside_kernels_ms"].get<double>());
  out << line;
  if (!profile["named_nodes"].get<bool>())
    out << "(this artifact names no nodes: compile it again for names, FLOPs and "
           "bytes)\n";
  out << "   share      ms/run  calls   GFLOP/s     GB/s  kernel           implementation"
         "        nodes\n";
  const json &calls = profile["calls"];
  for (size_t i = 0; i < calls.size() && i < top; ++i) {
    const json &call = calls[i];
    std::string impl = call["implementation"].get<std::string>();
    std::snprintf(
        line, sizeof line, "  %6.1f%%  %9.3f  %5llu  %8.1f  %7.2f  %-16s %-21s %s\n",
        call["share"].get<double>() * 100, call["ms"].get<double>(),
        static_cast<unsigned long long>(call["calls_per_run"].get<uint64_t>()),
        call["gflops"].get<double>(), call["gbps"].get<double>(), callName(call).c_str(),
        impl.empty() ? "-" : impl.c_str(), nodesText(call).c_str());
    out << line;
  }
  if (calls.size() > top) {
    double rest = 0;
    for (size_t i = top; i < calls.size(); ++i)
      rest += calls[i]["ms"].get<double>();
    std::snprintf(line, sizeof line, "  (%zu more calls: %.3f ms, %.1f%%)\n",
                  calls.size() - top, rest, runMs > 0 ? rest / runMs * 100 : 0);
    out << line;
  }
  printSums(profile["by_kind"], "kind", "by kind:", out);
  printSums(profile["by_op"], "op",
            "by op (a call counts for its costliest node's op):", out);
}

} // namespace flowc::cli
