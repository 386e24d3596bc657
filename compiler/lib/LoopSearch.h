// Search candidates of partitioned loop kernels: what one candidate changes
// in a kernel's lowering, parsed from its text (PlannedKernel::candidate).
//
// Grammar: "default" (or empty) for the lowering without search, otherwise
// items joined by ';', each key at most once:
//   parallel=N    N leading dimensions of every outermost nest run on OpenMP
//                 threads, whatever the nest's size (0: sequential); without
//                 it, ParallelLoops decides per nest
//   vector=W      the innermost loops are vectorized W lanes wide
//                 (llvm.loop.vectorize.width, forced on)
//   interleave=K  ... and K vector iterations interleaved
//                 (llvm.loop.interleave.count)
//   unroll=K      the innermost loops unrolled K times (llvm.loop.unroll.count)
// Forcing vectorization lets LLVM reorder a floating-point reduction, so a
// candidate may round differently from the default (search compares the
// results within a tolerance).
#pragma once

#include "flowc/compiler/Compiler.h"

#include <optional>
#include <string>
#include <string_view>

namespace llvm {
class Module;
} // namespace llvm

namespace flowc::compiler {

/// The text search uses for the default lowering (the same as an empty
/// candidate).
inline constexpr const char *kDefaultCandidate = "default";

struct LoopCandidate {
  /// Leading parallel dimensions of every outermost nest; nullopt: the
  /// default per-nest choice.
  std::optional<unsigned> parallelDims;
  /// 0: LLVM's own choice.
  unsigned vectorWidth = 0;
  unsigned interleave = 0;
  unsigned unroll = 0;

  bool annotatesLoops() const { return vectorWidth || interleave || unroll; }
  /// The canonical text (keys in the grammar's order), "default" when
  /// nothing is set.
  std::string text() const;
};

/// Parses a candidate text; InvalidArgument saying which item is wrong and
/// why (the caller names the kernel).
Expected<LoopCandidate> parseLoopCandidate(std::string_view text);

/// Puts the candidate's llvm.loop hints on every innermost loop of every
/// function defined in `module` (OpenMP's outlined bodies included), keeping
/// hints already there. Nothing for a candidate without loop hints.
void annotateInnermostLoops(llvm::Module &module, const LoopCandidate &candidate);

/// The object of a module defining `void flowc_measure_entry(void **args)`,
/// which calls `kernelSymbol` (linked into the same shared object) with
/// args[0..arguments) as its bare-pointer buffers.
Expected<std::string> measureEntryObject(const std::string &kernelSymbol,
                                         unsigned arguments, const CodeTarget &target);

inline constexpr const char *kMeasureEntrySymbol = "flowc_measure_entry";

} // namespace flowc::compiler
