// Search candidates of generated loop kernels: each lowers to code that
// computes what -O0 computes, the list is deterministic with the default
// first, bad candidates are refused by name, and trial runs time each one.
#include "flowc/compiler/Compiler.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"
#include "ImportBytes.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Session.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>

namespace flowc::compiler {
namespace {

using namespace flowc::testing;

/// y = Transpose(Softmax(x * Sigmoid(x)), [0, 2, 1]) on x[shape]: an
/// elementwise nest, row reductions (Softmax's max and sum) and a strided
/// copy, each large enough to have candidates.
std::string mixedModel(const std::vector<int64_t> &shape) {
  GraphSpec spec;
  spec.nodes = {
      node("Sigmoid", {"x"}, {"s"}, "sigmoid"), node("Mul", {"x", "s"}, {"m"}, "swish"),
      node("Softmax", {"m"}, {"p"}, "softmax", {intAttribute("axis", -1)}),
      node("Transpose", {"p"}, {"y"}, "transpose", {intsAttribute("perm", {0, 2, 1})})};
  spec.inputs = {valueInfo("x", shape)};
  spec.outputs = {valueInfo("y", {shape[0], shape[2], shape[1]})};
  return model(spec);
}

/// y = x * Sigmoid(x): one elementwise kernel.
std::string swishModel(const std::vector<int64_t> &shape) {
  GraphSpec spec;
  spec.nodes = {node("Sigmoid", {"x"}, {"s"}, "sigmoid"),
                node("Mul", {"x", "s"}, {"y"}, "swish")};
  spec.inputs = {valueInfo("x", shape)};
  spec.outputs = {valueInfo("y", shape)};
  return model(spec);
}

std::vector<float> inputValues(size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<float>((i * 37) % 101) / 25.0f - 2.0f;
  return values;
}

/// Runs the shared object `code` of a weight-free graph on `x` (through an
/// artifact and a runtime session, as a user would).
Expected<std::vector<float>> runCode(const std::string &code, const ImportedGraph &graph,
                                     const std::vector<float> &x, const TempDir &dir) {
  runtime::Plan plan;
  plan.entry = kEntrySymbol;
  for (const auto &input : graph.inputs)
    plan.inputs.push_back({input.name, "float32", input.shape});
  for (const auto &output : graph.outputs)
    plan.outputs.push_back({output.name, "float32", output.shape});
  std::string path = dir.file("model.fca");
  FLOWC_ASSIGN_OR_RETURN(auto writer, runtime::ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Metadata, "{}"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Code, code));
  FLOWC_RETURN_IF_ERROR(writer->addWeights({}).status());
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Plan, plan.toJson().dump()));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  FLOWC_ASSIGN_OR_RETURN(auto artifact, runtime::Artifact::open(path));
  FLOWC_ASSIGN_OR_RETURN(auto session, runtime::Session::create(artifact));
  FLOWC_ASSIGN_OR_RETURN(
      auto outputs,
      session->run({{graph.inputs[0].name,
                     runtime::Tensor::fromFloats(graph.inputs[0].shape, x)}}));
  return outputs.at(0).floats();
}

CompileOptions optimized() {
  CompileOptions options;
  options.optLevel = 2;
  return options;
}

/// The planned kernel with the most candidates, and they.
const PlannedKernel &mostCandidates(const CompilePlan &plan,
                                    const CompileOptions &options) {
  return *std::max_element(plan.kernels.begin(), plan.kernels.end(),
                           [&](const PlannedKernel &a, const PlannedKernel &b) {
                             return loopKernelCandidates(a, options).size() <
                                    loopKernelCandidates(b, options).size();
                           });
}

TEST(LoopCandidatesTest, EveryCandidateOfEveryKernelComputesWhatO0Computes) {
  std::vector<int64_t> shape = {2, 64, 128};
  std::string bytes = mixedModel(shape);
  auto graph = importBytes(bytes, "mixed.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  std::vector<float> x = inputValues(2 * 64 * 128);
  TempDir dir;

  // The reference: every op in generated loops, no candidates.
  CompileOptions o0;
  o0.optLevel = 0;
  auto referenceCode = compileToSharedObject(graph->irBytecode, o0, dir.path());
  ASSERT_TRUE(referenceCode) << referenceCode.status().toString();
  auto reference = runCode(*referenceCode, *graph, x, dir);
  ASSERT_TRUE(reference) << reference.status().toString();

  // -O2's kernels, each compiled once with the default.
  CompileOptions options = optimized();
  auto plan = planCompile(graph->irBytecode, options, CodeTarget::host());
  ASSERT_TRUE(plan) << plan.status().toString();
  ASSERT_GE(plan->kernels.size(), 2u);
  std::vector<std::string> defaults;
  for (const PlannedKernel &kernel : plan->kernels) {
    auto object = compileKernel(kernel, options, CodeTarget::host());
    ASSERT_TRUE(object) << object.status().toString();
    defaults.push_back(*object);
  }

  // Each candidate of each kernel in place of that kernel's default: the
  // whole graph still computes -O0's result.
  int variants = 0;
  for (size_t k = 0; k < plan->kernels.size(); ++k) {
    for (const std::string &candidate : loopKernelCandidates(plan->kernels[k], options)) {
      PlannedKernel variant = plan->kernels[k];
      variant.candidate = candidate;
      auto object = compileKernel(variant, options, CodeTarget::host());
      ASSERT_TRUE(object) << candidate << ": " << object.status().toString();
      std::vector<std::string> objects = defaults;
      objects[k] = *object;
      auto code = linkSharedObject(*plan, objects, dir.path());
      ASSERT_TRUE(code) << code.status().toString();
      auto y = runCode(*code, *graph, x, dir);
      ASSERT_TRUE(y) << candidate << ": " << y.status().toString();
      ASSERT_EQ(y->size(), reference->size());
      for (size_t i = 0; i < y->size(); ++i)
        ASSERT_NEAR((*y)[i], (*reference)[i], 1e-5 + 1e-4 * std::fabs((*reference)[i]))
            << plan->kernels[k].symbol << " candidate '" << candidate << "' at " << i;
      ++variants;
    }
  }
  // More than one candidate per kernel on average: the search has choices.
  EXPECT_GT(variants, 2 * static_cast<int>(plan->kernels.size()));
}

TEST(LoopCandidatesTest, CandidatesAreDeterministicDefaultFirstAndBounded) {
  auto graph = importBytes(mixedModel({2, 64, 128}), "mixed.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  CompileOptions options = optimized();
  auto plan = planCompile(graph->irBytecode, options, CodeTarget::host());
  ASSERT_TRUE(plan) << plan.status().toString();
  bool parallelChoices = false;
  for (const PlannedKernel &kernel : plan->kernels) {
    std::vector<std::string> candidates = loopKernelCandidates(kernel, options);
    // The same list every time, the default first, no repeats, at most 6.
    EXPECT_EQ(candidates, loopKernelCandidates(kernel, options));
    ASSERT_FALSE(candidates.empty());
    EXPECT_EQ(candidates.front(), "default");
    EXPECT_LE(candidates.size(), 6u);
    EXPECT_EQ(std::set<std::string>(candidates.begin(), candidates.end()).size(),
              candidates.size());
    for (const std::string &candidate : candidates)
      parallelChoices = parallelChoices || candidate.find("parallel=") == 0;
  }
  EXPECT_TRUE(parallelChoices);

  // Without parallel loops, no thread choices.
  CompileOptions sequential = optimized();
  sequential.disabledPasses = {"flowc-parallelize-loops"};
  auto sequentialPlan = planCompile(graph->irBytecode, sequential, CodeTarget::host());
  ASSERT_TRUE(sequentialPlan) << sequentialPlan.status().toString();
  for (const PlannedKernel &kernel : sequentialPlan->kernels)
    for (const std::string &candidate : loopKernelCandidates(kernel, sequential))
      EXPECT_EQ(candidate.find("parallel="), std::string::npos) << candidate;

  // A kernel too small to matter, and any kernel at -O0: the default only.
  auto tiny = importBytes(swishModel({4, 8}), "tiny.onnx");
  ASSERT_TRUE(tiny) << tiny.status().toString();
  auto tinyPlan = planCompile(tiny->irBytecode, options, CodeTarget::host());
  ASSERT_TRUE(tinyPlan) << tinyPlan.status().toString();
  ASSERT_EQ(tinyPlan->kernels.size(), 1u);
  EXPECT_EQ(loopKernelCandidates(tinyPlan->kernels[0], options),
            std::vector<std::string>{"default"});
  CompileOptions o0;
  o0.optLevel = 0;
  EXPECT_EQ(loopKernelCandidates(mostCandidates(*plan, options), o0),
            std::vector<std::string>{"default"});
}

TEST(LoopCandidatesTest, DefaultIsTheEmptyCandidateAndOthersChangeTheCode) {
  auto graph = importBytes(swishModel({8, 64, 256}), "swish.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  CompileOptions options = optimized();
  auto plan = planCompile(graph->irBytecode, options, CodeTarget::host());
  ASSERT_TRUE(plan) << plan.status().toString();
  ASSERT_EQ(plan->kernels.size(), 1u);
  PlannedKernel kernel = plan->kernels[0];
  auto empty = compileKernel(kernel, options, CodeTarget::host());
  ASSERT_TRUE(empty) << empty.status().toString();
  std::vector<std::string> candidates = loopKernelCandidates(kernel, options);
  ASSERT_GE(candidates.size(), 3u);
  std::set<std::string> keys;
  size_t vectorCandidates = 0, vectorChanges = 0;
  for (const std::string &candidate : candidates) {
    kernel.candidate = candidate;
    keys.insert(kernel.cacheKey());
    auto object = compileKernel(kernel, options, CodeTarget::host());
    ASSERT_TRUE(object) << candidate << ": " << object.status().toString();
    // "default" lowers exactly as no candidate; every other one is other
    // code (threads, vector width or unrolling changed). A forced vector
    // width may be the one LLVM picks itself on this host (16 f32 lanes
    // where the CPU prefers 512-bit vectors, 8 on AVX2), but not every one.
    bool vector = candidate.rfind("vector=", 0) == 0;
    vectorCandidates += vector;
    vectorChanges += vector && *object != *empty;
    if (candidate == "default") {
      EXPECT_TRUE(*object == *empty);
    } else if (!vector) {
      EXPECT_TRUE(*object != *empty) << candidate << " lowers as the default";
    }
  }
  if (vectorCandidates > 0) {
    EXPECT_GE(vectorChanges, 1u) << "every vector width lowers as the default";
  }
  // Every candidate is its own object in the kernel cache; no candidate is
  // the plan's key.
  EXPECT_EQ(keys.size(), candidates.size());
  kernel.candidate = "";
  EXPECT_EQ(kernel.cacheKey(), kernel.key);
}

TEST(LoopCandidatesTest, BadCandidateIsInvalidArgumentNamingKernelAndCandidate) {
  auto graph = importBytes(swishModel({8, 64, 256}), "swish.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  CompileOptions options = optimized();
  auto plan = planCompile(graph->irBytecode, options, CodeTarget::host());
  ASSERT_TRUE(plan) << plan.status().toString();
  PlannedKernel kernel = plan->kernels.at(0);
  auto compileWith = [&](const std::string &candidate, const CompileOptions &with) {
    PlannedKernel variant = kernel;
    variant.candidate = candidate;
    return compileKernel(variant, with, CodeTarget::host());
  };
  // Malformed: each error names the kernel, the candidate and the fault.
  EXPECT_THAT(compileWith("vector=3", options),
              StatusIs(StatusCode::InvalidArgument,
                       "kernel " + kernel.symbol +
                           ": candidate 'vector=3': vector=3: must be a power of two"));
  EXPECT_THAT(compileWith("speed=9", options),
              StatusIs(StatusCode::InvalidArgument, "candidate 'speed=9': unknown key"));
  EXPECT_THAT(compileWith("unroll=4;unroll=2", options),
              StatusIs(StatusCode::InvalidArgument, "key 'unroll' is given twice"));
  EXPECT_THAT(compileWith("unroll", options),
              StatusIs(StatusCode::InvalidArgument, "item 'unroll' is not key=value"));
  EXPECT_THAT(compileWith("parallel=x1", options),
              StatusIs(StatusCode::InvalidArgument, "parallel=x1: not a number"));
  // Well formed, but for parallel loops this compile does not have.
  CompileOptions sequential = optimized();
  sequential.disabledPasses = {"flowc-parallelize-loops"};
  EXPECT_THAT(compileWith("parallel=1", sequential),
              StatusIs(StatusCode::InvalidArgument,
                       "candidate 'parallel=1': sets parallel dimensions"));
  // Measuring is only for the kernel's own candidates.
  TempDir dir;
  EXPECT_THAT(
      measureLoopKernel(kernel, {"default", "unroll=64"}, options, {}, dir.path()),
      StatusIs(StatusCode::InvalidArgument,
               "kernel " + kernel.symbol +
                   ": candidate 'unroll=64' is not one of its candidates"));
  EXPECT_THAT(measureLoopKernel(kernel, {}, options, {}, dir.path()),
              StatusIs(StatusCode::InvalidArgument, "no candidates to measure"));
}

TEST(LoopCandidatesTest, MeasureTimesEveryCandidateOfAMillionElementKernel) {
  auto graph = importBytes(swishModel({16, 256, 256}), "swish.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  CompileOptions options = optimized();
  auto plan = planCompile(graph->irBytecode, options, CodeTarget::host());
  ASSERT_TRUE(plan) << plan.status().toString();
  ASSERT_EQ(plan->kernels.size(), 1u);
  const PlannedKernel &kernel = plan->kernels[0];
  std::vector<std::string> candidates = loopKernelCandidates(kernel, options);
  ASSERT_GE(candidates.size(), 3u);
  TempDir dir;
  MeasureOptions measure;
  measure.minRounds = 5;
  measure.maxRounds = 15;
  auto measured = measureLoopKernel(kernel, candidates, options, measure, dir.path());
  ASSERT_TRUE(measured) << measured.status().toString();
  // One timing per candidate, in their order, each from real runs.
  ASSERT_EQ(measured->timings.size(), candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const CandidateTiming &timing = measured->timings[i];
    EXPECT_EQ(timing.candidate, candidates[i]);
    EXPECT_GT(timing.samples, 0) << timing.candidate;
    EXPECT_GT(timing.medianNs, 0) << timing.candidate;
    EXPECT_LE(timing.lowNs, timing.medianNs);
    EXPECT_GE(timing.highNs, timing.medianNs);
    std::cout << "[ timing   ] " << timing.candidate << ": median "
              << timing.medianNs / 1e3 << " us, 95% [" << timing.lowNs / 1e3 << ", "
              << timing.highNs / 1e3 << "] us, " << timing.samples << " samples"
              << (timing.dropped ? ", dropped" : "") << "\n";
  }
  EXPECT_LT(measured->best, candidates.size());
  EXPECT_GE(measured->rounds, measure.minRounds);
  // The objects are unloaded and removed.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// Row means of x[256, 4096]: forcing the vector width reorders the sums,
// which stay within the trial run's tolerance, so no candidate is left out.
TEST(LoopCandidatesTest, MeasureKeepsReorderedReductionsWithinTolerance) {
  GraphSpec spec;
  spec.nodes = {node("ReduceMean", {"x"}, {"y"}, "mean", {intsAttribute("axes", {1})})};
  spec.inputs = {valueInfo("x", {256, 4096})};
  spec.outputs = {valueInfo("y", {256, 1})};
  auto graph = importBytes(model(spec), "mean.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  CompileOptions options = optimized();
  auto plan = planCompile(graph->irBytecode, options, CodeTarget::host());
  ASSERT_TRUE(plan) << plan.status().toString();
  auto reduction = std::find_if(
      plan->kernels.begin(), plan->kernels.end(), [&](const PlannedKernel &kernel) {
        std::vector<std::string> candidates = loopKernelCandidates(kernel, options);
        return std::find(candidates.begin(), candidates.end(), "vector=8") !=
               candidates.end();
      });
  ASSERT_NE(reduction, plan->kernels.end());
  std::vector<std::string> candidates = loopKernelCandidates(*reduction, options);
  TempDir dir;
  MeasureOptions measure;
  measure.minRounds = 5;
  measure.maxRounds = 15;
  auto measured = measureLoopKernel(*reduction, candidates, options, measure, dir.path());
  ASSERT_TRUE(measured) << measured.status().toString();
  ASSERT_EQ(measured->timings.size(), candidates.size());
  for (const CandidateTiming &timing : measured->timings) {
    EXPECT_GT(timing.samples, 0) << timing.candidate;
    std::cout << "[ timing   ] " << timing.candidate << ": median "
              << timing.medianNs / 1e3 << " us, 95% [" << timing.lowNs / 1e3 << ", "
              << timing.highNs / 1e3 << "] us\n";
  }
}

} // namespace
} // namespace flowc::compiler
