// What the .mlir tests (tests/compiler/passes) cannot say: library-kernel
// outlining's ABI parameters by name (what is absorbed, what is left
// alone), the arena planner's invariants on random lifetimes, and the
// split of partitioned kernels into modules of their own.
#include "LibraryKernels.h"
#include "MemoryPlan.h"
#include "Partition.h"
#include "transforms/Passes.h"

#include "../common/TestUtil.h"

#include "flowc/compiler/Compiler.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <random>

namespace flowc::compiler {
namespace {

/// `kernel`'s parameters as the struct of its kind (KernelAbi.h); a failed
/// expectation and zeros if the words are not one.
template <typename Params> Params paramsOf(const LibraryKernel &kernel) {
  std::optional<Params> params = runtime::paramsFromWords<Params>(kernel.params);
  EXPECT_TRUE(params) << kernel.function << " has " << kernel.params.size()
                      << " parameter words";
  return params.value_or(Params{});
}

class PassTest : public ::testing::Test {
protected:
  PassTest() {
    registry_.insert<mlir::arith::ArithDialect, mlir::bufferization::BufferizationDialect,
                     mlir::func::FuncDialect, mlir::linalg::LinalgDialect,
                     mlir::memref::MemRefDialect, mlir::tosa::TosaDialect>();
    context_.appendDialectRegistry(registry_);
    context_.loadAllAvailableDialects();
  }

  mlir::OwningOpRef<mlir::ModuleOp> run(const std::string &ir,
                                        std::unique_ptr<mlir::Pass> pass) {
    auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context_);
    EXPECT_TRUE(module) << "test IR does not parse";
    if (!module)
      return module;
    mlir::PassManager pm(&context_);
    pm.addPass(std::move(pass));
    EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
    EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
    return module;
  }

  template <typename Op> static int count(mlir::Operation *root) {
    int n = 0;
    root->walk([&](Op) { ++n; });
    return n;
  }

  static mlir::func::FuncOp main(mlir::ModuleOp module) {
    return module.lookupSymbol<mlir::func::FuncOp>("main");
  }

  mlir::DialectRegistry registry_;
  mlir::MLIRContext context_{mlir::MLIRContext::Threading::DISABLED};
};

// ResNet's block tail: NCHW input transposed for TOSA, OIHW weights
// transposed, the result transposed back, a residual add and a Relu.
constexpr const char *kConvBlock = R"mlir(
func.func @main(%x: tensor<1x8x6x6xf32>, %r: tensor<1x4x6x6xf32>,
                %w: tensor<4x8x3x3xf32> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"}) -> tensor<1x4x6x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %xt = tosa.transpose %x {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x8x6x6xf32>) -> tensor<1x6x6x8xf32>
  %wt = tosa.transpose %w {perms = array<i32: 0, 2, 3, 1>} : (tensor<4x8x3x3xf32>) -> tensor<4x3x3x8xf32>
  %c = tosa.conv2d %xt, %wt, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x3x3x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %ct = tosa.transpose %c {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x6x6x4xf32>) -> tensor<1x4x6x6xf32>
  %s = tosa.add %r, %ct : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %y = tosa.clamp %s {max_val = 0x7F800000 : f32, min_val = 0.0 : f32} : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  return %y : tensor<1x4x6x6xf32>
}
)mlir";

TEST_F(PassTest, ConvAbsorbsLayoutChangesResidualAndRelu) {
  auto module = run(kConvBlock, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  const LibraryKernel &kernel = kernels[0];
  EXPECT_EQ(kernel.kind, runtime::KernelKind::Conv2d);
  EXPECT_EQ(kernel.bufferCount, 5u); // source, weights, bias, residual, output
  const runtime::Conv2dParams p = paramsOf<runtime::Conv2dParams>(kernel);
  EXPECT_EQ(p.sourceLayout, runtime::ActivationLayout::Nchw);
  EXPECT_EQ(p.destinationLayout, runtime::ActivationLayout::Nchw);
  EXPECT_EQ(p.weightLayout, runtime::ConvWeightLayout::Oihw);
  EXPECT_EQ(p.inChannels, 8);
  EXPECT_EQ(p.outChannels, 4);
  EXPECT_EQ(p.padTop, 1);
  EXPECT_EQ(p.padRight, 1);
  EXPECT_EQ(p.constantWeights, 1);
  EXPECT_EQ(p.hasResidual, 1);
  EXPECT_EQ(p.activation, runtime::Activation::Clip);
  EXPECT_EQ(runtime::paramFloat(p.alpha), 0.0f);
  EXPECT_TRUE(std::isinf(runtime::paramFloat(p.beta)));
  // @main keeps only the call: every absorbed op is gone from it.
  mlir::func::FuncOp graph = main(*module);
  EXPECT_EQ(count<LibraryCallOp>(graph), 1);
  EXPECT_EQ(count<mlir::tosa::TransposeOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::Conv2DOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::ClampOp>(graph), 0);
  // The kernel keeps the exact TOSA semantics and never writes its inputs.
  auto function = module->lookupSymbol<mlir::func::FuncOp>(kernel.function);
  ASSERT_TRUE(function && function.isPrivate());
  EXPECT_EQ(count<mlir::tosa::Conv2DOp>(function), 1);
  for (unsigned i = 0; i < function.getNumArguments(); ++i)
    EXPECT_TRUE(function.getArgAttr(
        i, mlir::bufferization::BufferizationDialect::kWritableAttrName));
}

// The importer's fit to TOSA's exact windows: a stride-2 1x1 convolution
// reads 5 of 6 rows and columns through a slice.
constexpr const char *kCroppedConv = R"mlir(
func.func @main(%x: tensor<1x6x6x8xf32>, %w: tensor<4x1x1x8xf32> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"}) -> tensor<1x3x3x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %start = tosa.const_shape {values = dense<0> : tensor<4xindex>} : () -> !tosa.shape<4>
  %size = tosa.const_shape {values = dense<[1, 5, 5, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %xs = tosa.slice %x, %start, %size : (tensor<1x6x6x8xf32>, !tosa.shape<4>, !tosa.shape<4>) -> tensor<1x5x5x8xf32>
  %c = tosa.conv2d %xs, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x5x5x8xf32>, tensor<4x1x1x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x3x3x4xf32>
  return %c : tensor<1x3x3x4xf32>
}
)mlir";

TEST_F(PassTest, ConvReadsTheUncroppedSource) {
  auto module = run(kCroppedConv, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).inHeight, 6);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).inWidth, 6);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).outHeight, 3);
  EXPECT_EQ(count<mlir::tosa::SliceOp>(main(*module)), 0);
  // The kernel body keeps the crop: its semantics are TOSA's.
  auto function = module->lookupSymbol<mlir::func::FuncOp>(kernels[0].function);
  EXPECT_EQ(count<mlir::tosa::SliceOp>(function), 1);
}

TEST_F(PassTest, CropBeforePaddingOrAtTheStartStaysInGeneratedCode) {
  // A 3x3 window with padding after the cropped rows: the zeros would move.
  std::string padded = kCroppedConv;
  padded.replace(padded.find("pad = array<i64: 0, 0, 0, 0>"), 28,
                 "pad = array<i64: 1, 1, 1, 1>");
  padded.replace(padded.find("tensor<4x1x1x8xf32> {"), 19, "tensor<4x3x3x8xf32>");
  padded.replace(padded.find("(tensor<1x5x5x8xf32>, tensor<4x1x1x8xf32>"), 41,
                 "(tensor<1x5x5x8xf32>, tensor<4x3x3x8xf32>");
  // A crop that drops the first row and column instead of the last.
  std::string shifted = kCroppedConv;
  shifted.replace(shifted.find("dense<0> : tensor<4xindex>"), 26,
                  "dense<[0, 1, 1, 0]> : tensor<4xindex>");
  for (const std::string &ir : {padded, shifted}) {
    auto module = run(ir, createOutlineLibraryKernelsPass());
    ASSERT_TRUE(module);
    std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).inHeight, 5);
    EXPECT_EQ(count<mlir::tosa::SliceOp>(main(*module)), 1);
  }
}

TEST_F(PassTest, ConvResultUsedTwiceKeepsItsEpilogueOutside) {
  std::string ir = kConvBlock;
  // A second use of the transposed result: the add cannot be absorbed.
  ir.replace(ir.find("return %y : tensor<1x4x6x6xf32>"),
             std::string("return %y : tensor<1x4x6x6xf32>").size(),
             "%z = tosa.add %y, %ct : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> "
             "tensor<1x4x6x6xf32>\n  return %z : tensor<1x4x6x6xf32>");
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).hasResidual, 0);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).activation,
            runtime::Activation::None);
  EXPECT_EQ(count<mlir::tosa::AddOp>(main(*module)), 2);
  EXPECT_EQ(count<mlir::tosa::ClampOp>(main(*module)), 1);
}

TEST_F(PassTest, SiluAfterConvBecomesTheSwishPostOp) {
  // EfficientNet's x * sigmoid(x) on an NHWC convolution's result.
  constexpr const char *ir = R"mlir(
func.func @main(%x: tensor<1x6x6x8xf32>, %w: tensor<4x1x1x8xf32> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"}) -> tensor<1x6x6x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = tosa.conv2d %x, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x1x1x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %s = tosa.sigmoid %c : (tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32>
  %y = tosa.mul %s, %c, %shift : (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>, tensor<1xi8>) -> tensor<1x6x6x4xf32>
  return %y : tensor<1x6x6x4xf32>
}
)mlir";
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).activation,
            runtime::Activation::Swish);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).sourceLayout,
            runtime::ActivationLayout::Nhwc);
  EXPECT_EQ(paramsOf<runtime::Conv2dParams>(kernels[0]).weightLayout,
            runtime::ConvWeightLayout::Ohwi);
  EXPECT_EQ(count<mlir::tosa::SigmoidOp>(main(*module)), 0);
  EXPECT_EQ(count<mlir::tosa::MulOp>(main(*module)), 0);
}

// BERT's attention scores: (Q x K^T) reshaped to 4-D, scaled by 1/sqrt(d),
// plus the padding mask [1, 1, 1, S].
constexpr const char *kAttentionScores = R"mlir(
func.func @main(%q: tensor<2x8x4xf32>, %k: tensor<2x4x8xf32>, %mask: tensor<1x1x1x8xf32>)
    -> tensor<1x2x8x8xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s = tosa.matmul %q, %k, %zp, %zp : (tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x8x8xf32>
  %shape = tosa.const_shape {values = dense<[1, 2, 8, 8]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %r = tosa.reshape %s, %shape : (tensor<2x8x8xf32>, !tosa.shape<4>) -> tensor<1x2x8x8xf32>
  %c = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %m = tosa.mul %r, %c, %shift : (tensor<1x2x8x8xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x2x8x8xf32>
  %a = tosa.add %m, %mask : (tensor<1x2x8x8xf32>, tensor<1x1x1x8xf32>) -> tensor<1x2x8x8xf32>
  return %a : tensor<1x2x8x8xf32>
}
)mlir";

TEST_F(PassTest, AttentionScaleAndMaskBecomePostOpsOfTheProduct) {
  auto module = run(kAttentionScores, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  const runtime::MatMulParams p = paramsOf<runtime::MatMulParams>(kernels[0]);
  EXPECT_EQ(runtime::paramFloat(p.scale), 0.5f);
  EXPECT_EQ(p.hasMask, 1);
  EXPECT_EQ(p.maskRows, 0);
  EXPECT_EQ(p.maskColumns, 1);
  EXPECT_EQ(p.hasBias, 0);
  EXPECT_EQ(kernels[0].bufferCount, 4u); // Q, K^T, mask, scores
  EXPECT_EQ(count<mlir::tosa::MulOp>(main(*module)), 0);
  EXPECT_EQ(count<mlir::tosa::AddOp>(main(*module)), 0);
}

TEST_F(PassTest, ACausalMaskStaysOutsideTheProduct) {
  // A mask that differs by row would run the product on oneDNN's
  // reference implementation: only the scale is absorbed.
  std::string causal = kAttentionScores;
  for (size_t at; (at = causal.find("1x1x1x8xf32")) != std::string::npos;)
    causal.replace(at, 11, "1x1x8x8xf32");
  auto module = run(causal, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  const runtime::MatMulParams p = paramsOf<runtime::MatMulParams>(kernels[0]);
  EXPECT_EQ(runtime::paramFloat(p.scale), 0.5f);
  EXPECT_EQ(p.hasMask, 0);
  EXPECT_EQ(count<mlir::tosa::AddOp>(main(*module)), 1);
}

TEST_F(PassTest, MasksVaryingAlongTheBatchStayInGeneratedCode) {
  // A per-head mask [1, 2, 1, 8]: not a broadcast over the product's batch.
  std::string ir = kAttentionScores;
  for (std::string from = "tensor<1x1x1x8xf32>"; ir.find(from) != std::string::npos;)
    ir.replace(ir.find(from), from.size(), "tensor<1x2x1x8xf32>");
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  // The scale still goes in; the add stays outside.
  EXPECT_EQ(runtime::paramFloat(paramsOf<runtime::MatMulParams>(kernels[0]).scale), 0.5f);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).hasMask, 0);
  EXPECT_EQ(count<mlir::tosa::AddOp>(main(*module)), 1);
}

TEST_F(PassTest, MatMulOfTwoActivationsIsNotConstant) {
  constexpr const char *ir = R"mlir(
func.func @main(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>) -> tensor<2x4x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  return %s : tensor<2x4x4xf32>
}
)mlir";
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).batch, 2);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).transposedB, 1);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).constantB, 0);
}

TEST_F(PassTest, NonFloat32ProductsStayInGeneratedCode) {
  constexpr const char *ir = R"mlir(
func.func @main(%a: tensor<1x4x8xf16>, %b: tensor<1x8x2xf16>) -> tensor<1x4x2xf16> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf16>}> : () -> tensor<1xf16>
  %y = tosa.matmul %a, %b, %zp, %zp : (tensor<1x4x8xf16>, tensor<1x8x2xf16>, tensor<1xf16>, tensor<1xf16>) -> tensor<1x4x2xf16>
  return %y : tensor<1x4x2xf16>
}
)mlir";
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  EXPECT_TRUE(collectLibraryKernels(*module).empty());
  EXPECT_EQ(count<mlir::tosa::MatMulOp>(main(*module)), 1);
}

// ResNet's stem pooling as the importer writes it (NCHW around an NHWC op),
// then an average pooling of an NHWC activation.
constexpr const char *kPools = R"mlir(
func.func @main(%x: tensor<1x4x8x8xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x2x2x4xf32>) {
  %xt = tosa.transpose %x {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x4x8x8xf32>) -> tensor<1x8x8x4xf32>
  %m = tosa.max_pool2d %xt {kernel = array<i64: 3, 3>, pad = array<i64: 1, 0, 1, 0>, stride = array<i64: 2, 2>} : (tensor<1x8x8x4xf32>) -> tensor<1x4x4x4xf32>
  %mt = tosa.transpose %m {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %a = tosa.avg_pool2d %m, %zp, %zp {acc_type = f32, kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x4xf32>
  return %mt, %a : tensor<1x4x4x4xf32>, tensor<1x2x2x4xf32>
}
)mlir";

TEST_F(PassTest, PoolingBecomesAKernelWithItsLayoutChanges) {
  auto module = run(kPools, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 2u);
  const runtime::Pool2dParams max = paramsOf<runtime::Pool2dParams>(kernels[0]);
  EXPECT_EQ(kernels[0].kind, runtime::KernelKind::Pool2d);
  EXPECT_EQ(kernels[0].bufferCount, 2u);
  EXPECT_EQ(max.algorithm, runtime::PoolAlgorithm::Max);
  EXPECT_EQ(max.sourceLayout, runtime::ActivationLayout::Nchw);
  // The max pooling's result also feeds the average pooling, so its
  // transpose back stays in the graph.
  EXPECT_EQ(max.destinationLayout, runtime::ActivationLayout::Nhwc);
  EXPECT_EQ(max.channels, 4);
  EXPECT_EQ(max.inHeight, 8);
  EXPECT_EQ(max.outWidth, 4);
  EXPECT_EQ(max.kernelHeight, 3);
  EXPECT_EQ(max.strideW, 2);
  EXPECT_EQ(max.padTop, 1);
  EXPECT_EQ(max.padBottom, 0);
  EXPECT_EQ(max.padLeft, 1);
  EXPECT_EQ(max.padRight, 0);
  const runtime::Pool2dParams average = paramsOf<runtime::Pool2dParams>(kernels[1]);
  EXPECT_EQ(average.algorithm, runtime::PoolAlgorithm::AverageExcludingPadding);
  EXPECT_EQ(average.sourceLayout, runtime::ActivationLayout::Nhwc);
  EXPECT_EQ(average.kernelWidth, 2);
  mlir::func::FuncOp graph = main(*module);
  EXPECT_EQ(count<mlir::tosa::MaxPool2dOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::AvgPool2dOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::TransposeOp>(graph), 1);
}

TEST_F(PassTest, NonFloat32PoolingStaysInGeneratedCode) {
  constexpr const char *ir = R"mlir(
func.func @main(%x: tensor<1x4x4x2xf16>) -> tensor<1x2x2x2xf16> {
  %m = tosa.max_pool2d %x {kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x2xf16>) -> tensor<1x2x2x2xf16>
  return %m : tensor<1x2x2x2xf16>
}
)mlir";
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  EXPECT_TRUE(collectLibraryKernels(*module).empty());
  EXPECT_EQ(count<mlir::tosa::MaxPool2dOp>(main(*module)), 1);
}

// The importer's softmax over the last axis of attention scores.
constexpr const char *kSoftmax = R"mlir(
func.func @main(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %max = tosa.reduce_max %x {axis = 2 : i32} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %d = tosa.sub %x, %max : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %e = tosa.exp %d : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %sum = tosa.reduce_sum %e {axis = 2 : i32} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %inv = tosa.reciprocal %sum : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %y = tosa.mul %e, %inv, %shift : (tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<1xi8>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
)mlir";

TEST_F(PassTest, SoftmaxOverTheLastAxisBecomesOneKernel) {
  auto module = run(kSoftmax, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].kind, runtime::KernelKind::Softmax);
  EXPECT_EQ(kernels[0].bufferCount, 2u);
  EXPECT_EQ(paramsOf<runtime::SoftmaxParams>(kernels[0]).rows, 8);
  EXPECT_EQ(paramsOf<runtime::SoftmaxParams>(kernels[0]).channels, 8);
  mlir::func::FuncOp graph = main(*module);
  EXPECT_EQ(count<mlir::tosa::ExpOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::ReduceMaxOp>(graph), 0);
}

TEST_F(PassTest, SoftmaxNearMissesStayInGeneratedCode) {
  // The exponentials also leave the pattern: not a softmax any more.
  std::string ir = kSoftmax;
  ir.replace(ir.find("return %y : tensor<2x4x8xf32>"), 29,
             "%z = tosa.add %y, %e : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> "
             "tensor<2x4x8xf32>\n  return %z : tensor<2x4x8xf32>");
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  EXPECT_TRUE(collectLibraryKernels(*module).empty());
  // Normalized along another axis than the last.
  auto replaceAll = [](std::string text, const std::string &from, const std::string &to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at))
      text.replace(at, from.size(), to);
    return text;
  };
  ir = replaceAll(replaceAll(kSoftmax, "axis = 2", "axis = 1"), "tensor<2x4x1xf32>",
                  "tensor<2x1x8xf32>");
  module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  EXPECT_TRUE(collectLibraryKernels(*module).empty());
}

// LayerNorm over 8 channels as PyTorch exports it before opset 17
// (ReduceMean, Sub, Pow 2, ReduceMean, Add, Sqrt, Div, Mul, Add), imported.
constexpr const char *kTorchLayerNorm = R"mlir(
func.func @main(%x: tensor<1x4x8xf32>, %g: tensor<1x1x8xf32> {flowc.weight = "g"},
                %b: tensor<1x1x8xf32> {flowc.weight = "b"}) -> tensor<1x4x8xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %n = "tosa.const"() <{values = dense<0.125> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %eps = "tosa.const"() <{values = dense<1.0e-05> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %half = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %s1 = tosa.reduce_sum %x {axis = 2 : i32} : (tensor<1x4x8xf32>) -> tensor<1x4x1xf32>
  %m = tosa.mul %s1, %n, %shift : (tensor<1x4x1xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x1xf32>
  %d = tosa.sub %x, %m : (tensor<1x4x8xf32>, tensor<1x4x1xf32>) -> tensor<1x4x8xf32>
  %sq = tosa.mul %d, %d, %shift : (tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1xi8>) -> tensor<1x4x8xf32>
  %s2 = tosa.reduce_sum %sq {axis = 2 : i32} : (tensor<1x4x8xf32>) -> tensor<1x4x1xf32>
  %v = tosa.mul %s2, %n, %shift : (tensor<1x4x1xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x1xf32>
  %ve = tosa.add %v, %eps : (tensor<1x4x1xf32>, tensor<1x1x1xf32>) -> tensor<1x4x1xf32>
  %std = tosa.pow %ve, %half : (tensor<1x4x1xf32>, tensor<1x1x1xf32>) -> tensor<1x4x1xf32>
  %r = tosa.reciprocal %std : (tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %y = tosa.mul %d, %r, %shift : (tensor<1x4x8xf32>, tensor<1x4x1xf32>, tensor<1xi8>) -> tensor<1x4x8xf32>
  %yg = tosa.mul %y, %g, %shift : (tensor<1x4x8xf32>, tensor<1x1x8xf32>, tensor<1xi8>) -> tensor<1x4x8xf32>
  %yb = tosa.add %yg, %b : (tensor<1x4x8xf32>, tensor<1x1x8xf32>) -> tensor<1x4x8xf32>
  return %yb : tensor<1x4x8xf32>
}
)mlir";

TEST_F(PassTest, PyTorchLayerNormBecomesOneKernelWithScaleAndShift) {
  auto module = run(kTorchLayerNorm, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].kind, runtime::KernelKind::LayerNorm);
  EXPECT_EQ(kernels[0].bufferCount, 4u); // x, gamma, beta, output
  EXPECT_EQ(paramsOf<runtime::LayerNormParams>(kernels[0]).rows, 4);
  EXPECT_EQ(paramsOf<runtime::LayerNormParams>(kernels[0]).channels, 8);
  EXPECT_EQ(paramsOf<runtime::LayerNormParams>(kernels[0]).hasScale, 1);
  EXPECT_EQ(paramsOf<runtime::LayerNormParams>(kernels[0]).hasShift, 1);
  EXPECT_FLOAT_EQ(
      runtime::paramFloat(paramsOf<runtime::LayerNormParams>(kernels[0]).epsilon), 1e-5f);
  mlir::func::FuncOp graph = main(*module);
  EXPECT_EQ(count<mlir::tosa::ReduceSumOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::MulOp>(graph), 0);
}

TEST_F(PassTest, LayerNormNearMissesStayInGeneratedCode) {
  // A "mean" that divides by the wrong count is not a mean.
  std::string ir = kTorchLayerNorm;
  ir.replace(ir.find("dense<0.125>"), 12, "dense<0.25>");
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  EXPECT_TRUE(collectLibraryKernels(*module).empty());
  // The centered values read elsewhere too.
  ir = kTorchLayerNorm;
  ir.replace(ir.find("return %yb : tensor<1x4x8xf32>"), 30,
             "%z = tosa.add %yb, %d : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> "
             "tensor<1x4x8xf32>\n  return %z : tensor<1x4x8xf32>");
  module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  EXPECT_TRUE(collectLibraryKernels(*module).empty());
}

TEST(ArenaTest, BuffersAliveTogetherNeverShareBytes) {
  std::mt19937 random(3);
  std::vector<BufferLifetime> buffers;
  for (int i = 0; i < 200; ++i) {
    int64_t first = static_cast<int64_t>(random() % 100);
    int64_t span = static_cast<int64_t>(random() % 20);
    buffers.push_back({1 + random() % 5000, first, first + span});
  }
  std::vector<uint64_t> offsets;
  uint64_t arena = assignArenaOffsets(buffers, offsets);
  uint64_t peakLive = 0;
  for (int64_t t = 0; t < 120; ++t) {
    uint64_t live = 0;
    for (const BufferLifetime &buffer : buffers)
      live += buffer.first <= t && t <= buffer.last ? buffer.bytes : 0;
    peakLive = std::max(peakLive, live);
  }
  EXPECT_GE(arena, peakLive);
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(offsets[i] % runtime::kArenaAlignment, 0u);
    EXPECT_LE(offsets[i] + buffers[i].bytes, arena);
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      bool together =
          buffers[i].first <= buffers[j].last && buffers[j].first <= buffers[i].last;
      bool apart = offsets[i] + buffers[i].bytes <= offsets[j] ||
                   offsets[j] + buffers[j].bytes <= offsets[i];
      EXPECT_TRUE(!together || apart) << i << " and " << j;
    }
  }
  // Far smaller than giving every buffer its own bytes.
  uint64_t total = 0;
  for (const BufferLifetime &buffer : buffers)
    total += buffer.bytes;
  EXPECT_LT(arena, total / 2);
}

TEST(ArenaTest, SequentialBuffersReuseOneSlot) {
  std::vector<uint64_t> offsets;
  EXPECT_EQ(assignArenaOffsets({{100, 0, 1}, {100, 2, 3}, {100, 4, 5}}, offsets), 128u);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(assignArenaOffsets({}, offsets), 0u);
}

// Two identical scalings on different buffers, one with another constant, a
// copy through a strided view, and a fill of a buffer of dynamic size.
constexpr const char *kLoopNestsToPartition = R"mlir(
#id = affine_map<(i, j) -> (i, j)>
func.func @main(%a: memref<64x64xf32>, %b: memref<64x64xf32>, %c: memref<64x64xf32>,
                %d: memref<?x64xf32>) {
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<64x64xf32>) outs(%b : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %two : f32
    linalg.yield %m : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b : memref<64x64xf32>) outs(%c : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %two : f32
    linalg.yield %m : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<64x64xf32>) outs(%a : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %three : f32
    linalg.yield %m : f32
  }
  %half = memref.subview %a[32, 0] [32, 64] [1, 1]
      : memref<64x64xf32> to memref<32x64xf32, strided<[64, 1], offset: 2048>>
  %top = memref.subview %b[0, 0] [32, 64] [1, 1]
      : memref<64x64xf32> to memref<32x64xf32, strided<[64, 1]>>
  linalg.copy ins(%half : memref<32x64xf32, strided<[64, 1], offset: 2048>>)
              outs(%top : memref<32x64xf32, strided<[64, 1]>>)
  linalg.fill ins(%two : f32) outs(%d : memref<?x64xf32>)
  return
}
)mlir";

// What the partitioned IR looks like is in passes/partition-kernels.mlir;
// here, what splitKernelModules makes of it.
TEST_F(PassTest, SplitMovesEachKernelIntoAModuleOfItsOwn) {
  auto module = run(kLoopNestsToPartition, createPartitionKernelsPass());
  ASSERT_TRUE(module);
  // The two scalings by 2 share one kernel; by 3 and the copy have their
  // own; the four calls stay in @main.
  std::vector<KernelModule> split = splitKernelModules(*module);
  ASSERT_EQ(split.size(), 3u);
  int callSites = 0;
  for (KernelModule &kernel : split) {
    callSites += kernel.callSites;
    EXPECT_TRUE(mlir::succeeded(mlir::verify(*kernel.module)));
    auto definition = kernel.module->lookupSymbol<mlir::func::FuncOp>(kernel.symbol);
    ASSERT_TRUE(definition);
    EXPECT_TRUE(definition.isPublic());
    EXPECT_FALSE(definition->hasAttr(kLoopKernelAttr));
    EXPECT_NE(kernel.text.find(kernel.symbol), std::string::npos);
    auto declaration = module->lookupSymbol<mlir::func::FuncOp>(kernel.symbol);
    ASSERT_TRUE(declaration);
    EXPECT_TRUE(declaration.isExternal());
    EXPECT_FALSE(declaration->hasAttr(kLoopKernelAttr));
  }
  EXPECT_EQ(callSites, 4);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
}

// A graph the compile refuses gets an error that says why: a pass that
// refuses its input names the stage, the pass and its diagnostic (once
// "lowering to buffers failed: " with nothing after it); a malformed flowc
// attribute is refused as the graph is read, with the dialect verifier's
// message.
TEST(PassFailureTest, RefusedGraphsSayWhatIsWrong) {
  struct Refused {
    const char *signature;
    StatusCode code;
    const char *message;
  };
  const Refused cases[] = {
      // Claims an arena already: flowc-plan-activation-memory refuses to
      // plan it again.
      {"%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> attributes "
       "{flowc.arena_bytes = 64 : i64}",
       StatusCode::Internal,
       "lowering to buffers failed in flowc-plan-activation-memory: 'func.func' op "
       "already has an activation arena (flowc.arena_bytes); the memory plan runs once"},
      {"%x: tensor<4xf32>, %w: tensor<4xf32> {flowc.weight = 7 : i64}) -> tensor<4xf32>",
       StatusCode::DataLoss,
       "graph IR does not verify: 'func.func' op argument 1 of region 0: "
       "attribute 'flowc.weight' must be a non-empty string, got 7 : i64"},
  };
  CompileOptions options;
  options.optLevel = 1;
  for (const Refused &refused : cases) {
    std::string ir = std::string("func.func @main(") + refused.signature + R"mlir( {
  %y = tosa.add %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
)mlir";
    EXPECT_THAT(planCompile(ir, options, CodeTarget::host()).status(),
                testing::StatusIs(refused.code, refused.message))
        << ir;
  }
}

} // namespace
} // namespace flowc::compiler
