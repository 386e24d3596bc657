// The flowc dialect through the compiler's C++ API: the outline pass's
// library_call carries the kind's params struct, and what later steps read
// back (collectLibraryKernels) is that struct. The verifier's messages are
// checked in tests/compiler/passes/*-invalid.mlir.
#include "LibraryKernels.h"
#include "transforms/Passes.h"

#include "flowc/compiler/dialect/FlowcDialect.h"
#include "flowc/runtime/KernelAbi.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flowc::compiler {
namespace {

class FlowcDialectTest : public ::testing::Test {
protected:
  FlowcDialectTest() {
    registry_.insert<mlir::bufferization::BufferizationDialect, mlir::func::FuncDialect,
                     mlir::tosa::TosaDialect, FlowcDialect>();
    context_.appendDialectRegistry(registry_);
    context_.loadAllAvailableDialects();
  }

  /// Parses `ir` (which verifies it); the diagnostics go to `errors_`.
  mlir::OwningOpRef<mlir::ModuleOp> parse(const std::string &ir) {
    mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &diagnostic) {
      errors_ += diagnostic.str() + "\n";
      return mlir::success();
    });
    return mlir::parseSourceString<mlir::ModuleOp>(ir, &context_);
  }

  mlir::DialectRegistry registry_;
  mlir::MLIRContext context_{mlir::MLIRContext::Threading::DISABLED};
  std::string errors_;
};

// A 1x1 convolution of a graph weight: one conv2d kernel.
constexpr const char *kConv = R"mlir(
func.func @main(%x: tensor<1x4x4x8xf32>, %w: tensor<2x1x1x8xf32> {flowc.weight = "w"},
                %b: tensor<2xf32> {flowc.weight = "b"}) -> tensor<1x4x4x2xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %c = tosa.conv2d %x, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x4x8xf32>, tensor<2x1x1x8xf32>, tensor<2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x4x2xf32>
  return %c : tensor<1x4x4x2xf32>
}
)mlir";

TEST_F(FlowcDialectTest, OutlineCallsTheKernelWithItsParamsStruct) {
  // Outline with bf16 kernels.
  auto module = parse(kConv);
  ASSERT_TRUE(module) << errors_;
  mlir::PassManager pm(&context_);
  pm.addPass(createOutlineLibraryKernelsPass(Precision::Bf16));
  ASSERT_TRUE(mlir::succeeded(pm.run(*module))) << errors_;
  // @main calls the kernel through one flowc.library_call.
  LibraryCallOp call;
  int calls = 0;
  module->walk([&](LibraryCallOp op) {
    call = op;
    ++calls;
  });
  ASSERT_EQ(calls, 1);
  EXPECT_EQ(call.getKind(), LibraryKernelKind::Conv2d);
  EXPECT_EQ(call.getCallee(), "flowc_kernel_0");
  EXPECT_EQ(call.getInputs().size(), 3u); // source, weights, bias
  // Its params are a Conv2dParams.
  auto params = runtime::paramsFromWords<runtime::Conv2dParams>(call.getParams());
  ASSERT_TRUE(params);
  EXPECT_EQ(params->inChannels, 8);
  EXPECT_EQ(params->outChannels, 2);
  EXPECT_EQ(params->weightLayout, runtime::ConvWeightLayout::Ohwi);
  EXPECT_EQ(params->constantWeights, 1);
  EXPECT_EQ(params->precision, Precision::Bf16);
  // The IR prints with the op's syntax and parses back.
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  EXPECT_NE(text.find("flowc.library_call conv2d @flowc_kernel_0("), std::string::npos)
      << text;
  EXPECT_TRUE(parse(text)) << errors_;
}

TEST_F(FlowcDialectTest, LoweredCallTagsTheCallee) {
  // Outline, then lower the calls as the pipeline does before bufferization.
  auto module = parse(kConv);
  ASSERT_TRUE(module) << errors_;
  mlir::PassManager pm(&context_);
  pm.addPass(createOutlineLibraryKernelsPass());
  pm.addPass(createLowerLibraryCallsPass());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module))) << errors_;
  int libraryCalls = 0, funcCalls = 0;
  module->walk([&](LibraryCallOp) { ++libraryCalls; });
  module->walk([&](mlir::func::CallOp) { ++funcCalls; });
  EXPECT_EQ(libraryCalls, 0);
  EXPECT_EQ(funcCalls, 1);
  // The callee carries the kind and params, read through the typed helpers.
  auto function = module->lookupSymbol<mlir::func::FuncOp>("flowc_kernel_0");
  ASSERT_TRUE(function);
  auto *dialect = context_.getLoadedDialect<FlowcDialect>();
  ASSERT_TRUE(dialect);
  mlir::StringAttr kind = dialect->getKernelAttrHelper().getAttr(function);
  ASSERT_TRUE(kind);
  EXPECT_EQ(kind.getValue(), "conv2d");
  mlir::DenseI64ArrayAttr words = dialect->getKernelParamsAttrHelper().getAttr(function);
  ASSERT_TRUE(words);
  EXPECT_EQ(words.size(), sizeof(runtime::Conv2dParams) / 8);
  // collectLibraryKernels reads the same kernel before and after lowering.
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].kind, runtime::KernelKind::Conv2d);
  EXPECT_EQ(kernels[0].params,
            std::vector<int64_t>(words.asArrayRef().begin(), words.asArrayRef().end()));
}

} // namespace
} // namespace flowc::compiler
