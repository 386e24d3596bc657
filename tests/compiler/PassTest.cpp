// The compiler's own MLIR passes on hand-written IR: library-kernel
// outlining (what is absorbed, what is left alone) and static memory
// planning (offsets, liveness, the rewritten IR), and the choice of loop
// nests that run in parallel, and the partitioning into kernels.
#include "DerivedWeights.h"
#include "LibraryKernels.h"
#include "MemoryPlan.h"
#include "ParallelLoops.h"
#include "Partition.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
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
                     mlir::memref::MemRefDialect, mlir::scf::SCFDialect,
                     mlir::tosa::TosaDialect>();
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

TEST_F(PassTest, MatMulReadsTransposedWeightInPlaceAndFusesBias) {
  // Gemm with transB=1 and a bias, as the importer writes it.
  constexpr const char *ir = R"mlir(
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<6x8xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shape = tosa.const_shape {values = dense<[1, 8, 6]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %wt = tosa.transpose %w {perms = array<i32: 1, 0>} : (tensor<6x8xf32>) -> tensor<8x6xf32>
  %w3 = tosa.reshape %wt, %shape : (tensor<8x6xf32>, !tosa.shape<3>) -> tensor<1x8x6xf32>
  %y = tosa.matmul %x, %w3, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %z = tosa.add %y, %b : (tensor<1x4x6xf32>, tensor<1x1x6xf32>) -> tensor<1x4x6xf32>
  return %z : tensor<1x4x6xf32>
}
)mlir";
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  const runtime::MatMulParams p = paramsOf<runtime::MatMulParams>(kernels[0]);
  EXPECT_EQ(kernels[0].kind, runtime::KernelKind::MatMul);
  EXPECT_EQ(kernels[0].bufferCount, 4u); // A, B, bias, output
  EXPECT_EQ(p.m, 4);
  EXPECT_EQ(p.n, 6);
  EXPECT_EQ(p.k, 8);
  EXPECT_EQ(p.transposedB, 1);
  EXPECT_EQ(p.constantB, 1);
  EXPECT_EQ(p.hasBias, 1);
  EXPECT_EQ(p.hasResidual, 0);
  EXPECT_EQ(count<mlir::tosa::MatMulOp>(main(*module)), 0);
}

TEST_F(PassTest, ErfGeluAfterMatMulBecomesOnePostOp) {
  // BERT's feed-forward: x W + b, then PyTorch's erf GELU.
  constexpr const char *ir = R"mlir(
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<1x8x6xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %sqrt2 = "tosa.const"() <{values = dense<1.41421354> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %one = "tosa.const"() <{values = dense<1.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %half = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %y = tosa.matmul %x, %w, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %h = tosa.add %b, %y : (tensor<1x1x6xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %r = tosa.reciprocal %sqrt2 : (tensor<1x1x1xf32>) -> tensor<1x1x1xf32>
  %s = tosa.mul %h, %r, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %e = tosa.erf %s : (tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %a = tosa.add %e, %one : (tensor<1x4x6xf32>, tensor<1x1x1xf32>) -> tensor<1x4x6xf32>
  %p = tosa.mul %h, %a, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %g = tosa.mul %p, %half, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  return %g : tensor<1x4x6xf32>
}
)mlir";
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).hasBias, 1);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).activation,
            runtime::Activation::GeluErf);
  EXPECT_EQ(count<mlir::tosa::ErfOp>(main(*module)), 0);
  EXPECT_EQ(count<mlir::tosa::MulOp>(main(*module)), 0);
  // With a different constant (not sqrt(2)) it is not GELU: left alone.
  std::string other = ir;
  other.replace(other.find("1.41421354"), 10, "1.50000000");
  auto unchanged = run(other, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(unchanged);
  EXPECT_EQ(
      paramsOf<runtime::MatMulParams>(collectLibraryKernels(*unchanged)[0]).activation,
      runtime::Activation::None);
  EXPECT_EQ(count<mlir::tosa::ErfOp>(main(*unchanged)), 1);
}

TEST_F(PassTest, TanhGeluAfterMatMulBecomesOnePostOp) {
  // GPT-2's feed-forward: x W + b, then the tanh approximation of GELU
  // (Pow by 3 imported as products).
  constexpr const char *ir = R"mlir(
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<1x8x6xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.0447149985> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %k = "tosa.const"() <{values = dense<0.797884583> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %one = "tosa.const"() <{values = dense<1.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %half = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %y = tosa.matmul %x, %w, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %h = tosa.add %y, %b : (tensor<1x4x6xf32>, tensor<1x1x6xf32>) -> tensor<1x4x6xf32>
  %hh = tosa.mul %h, %half, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %sq = tosa.mul %h, %h, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %cube = tosa.mul %sq, %h, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %q = tosa.mul %c, %cube, %shift : (tensor<1x1x1xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %r = tosa.add %h, %q : (tensor<1x4x6xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %s = tosa.mul %k, %r, %shift : (tensor<1x1x1xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %t = tosa.tanh %s : (tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %u = tosa.add %one, %t : (tensor<1x1x1xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %g = tosa.mul %hh, %u, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  return %g : tensor<1x4x6xf32>
}
)mlir";
  auto module = run(ir, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(module);
  std::vector<LibraryKernel> kernels = collectLibraryKernels(*module);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).hasBias, 1);
  EXPECT_EQ(paramsOf<runtime::MatMulParams>(kernels[0]).activation,
            runtime::Activation::GeluTanh);
  EXPECT_EQ(count<mlir::tosa::TanhOp>(main(*module)), 0);
  EXPECT_EQ(count<mlir::tosa::MulOp>(main(*module)), 0);
  // A cube coefficient other than GELU's: left alone.
  std::string other = ir;
  other.replace(other.find("0.0447149985"), 12, "0.0500000000");
  auto unchanged = run(other, createOutlineLibraryKernelsPass());
  ASSERT_TRUE(unchanged);
  EXPECT_EQ(
      paramsOf<runtime::MatMulParams>(collectLibraryKernels(*unchanged)[0]).activation,
      runtime::Activation::None);
  EXPECT_EQ(count<mlir::tosa::TanhOp>(main(*unchanged)), 1);
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

// A convolution whose result is also returned before its per-channel
// affine: the affine cannot fold, but its factors still become derived
// weights; the convolution's transposed weight alone does not (kernels read
// it in place).
constexpr const char *kConvAffineTwice = R"mlir(
func.func @main(%x: tensor<1x6x6x8xf32>, %w: tensor<4x8x3x3xf32> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"},
                %s: tensor<1x1x1x4xf32> {flowc.weight = "s"},
                %unused: tensor<4xf32> {flowc.weight = "unused"})
    -> (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>) {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %two = "tosa.const"() <{values = dense<2.0> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %wt = tosa.transpose %w {perms = array<i32: 0, 2, 3, 1>} : (tensor<4x8x3x3xf32>) -> tensor<4x3x3x8xf32>
  %c = tosa.conv2d %x, %wt, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x3x3x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %f = tosa.mul %s, %two, %shift : (tensor<1x1x1x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x1x1x4xf32>
  %y = tosa.mul %c, %f, %shift : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>, tensor<1xi8>) -> tensor<1x6x6x4xf32>
  %z = tosa.add %y, %f : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x6x6x4xf32>
  return %c, %z : tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>
}
)mlir";

TEST_F(PassTest, AffineOfASharedConvResultStaysButItsFactorIsDerived) {
  auto module = run(kConvAffineTwice, createDeriveWeightsPass());
  ASSERT_TRUE(module);
  CodeWeights weights = collectCodeWeights(*module);
  // w and b as they were, one derived weight (s * 2, read twice); `s` and
  // the unused weight are no longer bound.
  EXPECT_EQ(weights.keys, (std::vector<std::string>{"w", "b", "flowc.derived/0"}));
  ASSERT_EQ(weights.derived.size(), 1u);
  EXPECT_EQ(weights.derived[0].inputs, (std::vector<std::string>{"s"}));
  EXPECT_EQ(weights.derived[0].info.shape, (std::vector<int64_t>{1, 1, 1, 4}));
  mlir::func::FuncOp graph = main(*module);
  EXPECT_EQ(count<mlir::tosa::Conv2DOp>(graph), 1);
  EXPECT_EQ(count<mlir::tosa::MulOp>(graph), 1);
  EXPECT_EQ(count<mlir::tosa::AddOp>(graph), 1);
  EXPECT_EQ(count<mlir::tosa::TransposeOp>(graph), 1);
}

TEST_F(PassTest, AffineAfterAnNhwcConvFoldsIntoItsWeights) {
  std::string ir = kConvAffineTwice;
  // The convolution's result now feeds only the affine.
  ir.replace(ir.find("return %c, %z"), 13, "return %z, %z");
  auto module = run(ir, createDeriveWeightsPass());
  ASSERT_TRUE(module);
  CodeWeights weights = collectCodeWeights(*module);
  EXPECT_EQ(weights.keys,
            (std::vector<std::string>{"flowc.derived/0", "flowc.derived/1"}));
  ASSERT_EQ(weights.derived.size(), 2u);
  EXPECT_EQ(weights.derived[0].info.shape, (std::vector<int64_t>{4, 3, 3, 8}));
  EXPECT_EQ(weights.derived[1].info.shape, (std::vector<int64_t>{4}));
  mlir::func::FuncOp graph = main(*module);
  EXPECT_EQ(count<mlir::tosa::Conv2DOp>(graph), 1);
  EXPECT_EQ(count<mlir::tosa::MulOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::AddOp>(graph), 0);
  EXPECT_EQ(count<mlir::tosa::TransposeOp>(graph), 0);
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

TEST_F(PassTest, PlanTurnsAllocationsIntoArenaViews) {
  // a -> b -> c -> out: a is dead when c is made, so they share bytes.
  constexpr const char *ir = R"mlir(
func.func @main(%x: memref<4xf32>, %out: memref<4xf32>) {
  %a = memref.alloc() : memref<4xf32>
  linalg.copy ins(%x : memref<4xf32>) outs(%a : memref<4xf32>)
  %b = memref.alloc() : memref<4xf32>
  linalg.copy ins(%a : memref<4xf32>) outs(%b : memref<4xf32>)
  %c = memref.alloc() : memref<4xf32>
  linalg.copy ins(%b : memref<4xf32>) outs(%c : memref<4xf32>)
  linalg.copy ins(%c : memref<4xf32>) outs(%out : memref<4xf32>)
  return
}
)mlir";
  auto module = run(ir, createPlanActivationMemoryPass());
  ASSERT_TRUE(module);
  mlir::func::FuncOp graph = main(*module);
  EXPECT_EQ(count<mlir::memref::AllocOp>(graph), 0);
  EXPECT_EQ(count<mlir::memref::ViewOp>(graph), 3);
  EXPECT_EQ(plannedArenaBytes(*module), 2 * runtime::kArenaAlignment);
  ASSERT_EQ(graph.getNumArguments(), 3u);
  auto arena = mlir::dyn_cast<mlir::MemRefType>(graph.getArgument(2).getType());
  ASSERT_TRUE(arena);
  EXPECT_EQ(arena.getNumElements(), int64_t(2 * runtime::kArenaAlignment));
}

// A product adding a residual: where the residual dies at the call, the
// output takes its bytes (add-to-output); not where it is read later, nor
// where it is also the product's source.
TEST_F(PassTest, PlanWritesOutputsOverResidualsThatDieThere) {
  constexpr const char *ir = R"mlir(
func.func private @mm(memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>,
                      memref<1x4x4xf32>)
    attributes {flowc.kernel = "matmul",
                flowc.kernel_params = array<i64: 1, 4, 4, 4, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0>}
func.func @main(%x: memref<1x4x4xf32>, %w: memref<1x4x4xf32>, %out: memref<1x4x4xf32>) {
  %r = memref.alloc() : memref<1x4x4xf32>
  linalg.copy ins(%x : memref<1x4x4xf32>) outs(%r : memref<1x4x4xf32>)
  %y = memref.alloc() : memref<1x4x4xf32>
  call @mm(%x, %w, %r, %y) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  %z = memref.alloc() : memref<1x4x4xf32>
  call @mm(%x, %w, %y, %z) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  linalg.copy ins(%y : memref<1x4x4xf32>) outs(%out : memref<1x4x4xf32>)
  %u = memref.alloc() : memref<1x4x4xf32>
  call @mm(%z, %w, %z, %u) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  linalg.copy ins(%u : memref<1x4x4xf32>) outs(%out : memref<1x4x4xf32>)
  return
}
)mlir";
  auto module = run(ir, createPlanActivationMemoryPass());
  ASSERT_TRUE(module);
  std::vector<int64_t> offsets;
  main(*module).walk([&](mlir::memref::ViewOp view) {
    offsets.push_back(
        view.getByteShift().getDefiningOp<mlir::arith::ConstantIndexOp>().value());
  });
  ASSERT_EQ(offsets.size(), 4u); // r, y, z, u
  EXPECT_EQ(offsets[1], offsets[0]);
  EXPECT_NE(offsets[2], offsets[1]);
  EXPECT_NE(offsets[3], offsets[2]);
  // z dies at u's call, but u may not overwrite its source; u takes r/y's
  // bytes instead, dead by then.
  EXPECT_EQ(offsets[3], offsets[0]);
  EXPECT_EQ(plannedArenaBytes(*module), 2 * runtime::kArenaAlignment);

  // The same graph with the residual flag off: nothing is shared, and r is
  // dead when z is made, so the plan reuses its bytes the usual way.
  std::string plain = ir;
  plain.replace(plain.find("0, 1, 0, 1, 0"), 13, "0, 1, 0, 0, 0");
  auto unshared = run(plain, createPlanActivationMemoryPass());
  ASSERT_TRUE(unshared);
  offsets.clear();
  main(*unshared).walk([&](mlir::memref::ViewOp view) {
    offsets.push_back(
        view.getByteShift().getDefiningOp<mlir::arith::ConstantIndexOp>().value());
  });
  ASSERT_EQ(offsets.size(), 4u);
  EXPECT_NE(offsets[1], offsets[0]);
}

TEST_F(PassTest, PlanLeavesDynamicAllocationsAlone) {
  constexpr const char *ir = R"mlir(
func.func @main(%x: memref<?xf32>, %n: index) {
  %a = memref.alloc(%n) : memref<?xf32>
  linalg.copy ins(%x : memref<?xf32>) outs(%a : memref<?xf32>)
  memref.dealloc %a : memref<?xf32>
  return
}
)mlir";
  auto module = run(ir, createPlanActivationMemoryPass());
  ASSERT_TRUE(module);
  EXPECT_EQ(count<mlir::memref::AllocOp>(main(*module)), 1);
  EXPECT_EQ(plannedArenaBytes(*module), 0u);
  EXPECT_EQ(main(*module).getNumArguments(), 2u);
}

// What linalg-to-parallel-loops makes of an elementwise op on 1x128x768
// (large), one on 4x8 (small), and a softmax-like row reduction.
constexpr const char *kLoopNests = R"mlir(
func.func @main(%a: memref<1x128x768xf32>, %b: memref<4x8xf32>, %r: memref<64x512xf32>,
                %out: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %c512 = arith.constant 512 : index
  %c768 = arith.constant 768 : index
  scf.parallel (%i, %j, %k) = (%c0, %c0, %c0) to (%c1, %c128, %c768) step (%c1, %c1, %c1) {
    %v = memref.load %a[%i, %j, %k] : memref<1x128x768xf32>
    %w = arith.addf %v, %v : f32
    memref.store %w, %a[%i, %j, %k] : memref<1x128x768xf32>
    scf.reduce
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c8) step (%c1, %c1) {
    %v = memref.load %b[%i, %j] : memref<4x8xf32>
    %w = arith.mulf %v, %v : f32
    memref.store %w, %b[%i, %j] : memref<4x8xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %k = %c0 to %c512 step %c1 {
      %v = memref.load %r[%i, %k] : memref<64x512xf32>
      %acc = memref.load %out[%i] : memref<64xf32>
      %s = arith.addf %v, %acc : f32
      memref.store %s, %out[%i] : memref<64xf32>
    }
    scf.reduce
  }
  return
}
)mlir";

TEST_F(PassTest, LargeNestsKeepOuterDimensionsParallelSmallOnesRunSequentially) {
  auto module = run(kLoopNests, createParallelizeLoopsPass());
  ASSERT_TRUE(module);
  llvm::SmallVector<mlir::scf::ParallelOp> parallel;
  main(*module).walk([&](mlir::scf::ParallelOp loop) { parallel.push_back(loop); });
  // The elementwise nest: (1, 128) in parallel around a sequential loop over
  // 768 (the vectorized one); the row reduction as it was; the 4x8 nest
  // sequential.
  ASSERT_EQ(parallel.size(), 2u);
  EXPECT_EQ(parallel[0].getNumLoops(), 2u);
  auto inner = mlir::dyn_cast<mlir::scf::ForOp>(&parallel[0].getBody()->front());
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner.getUpperBound().getDefiningOp<mlir::arith::ConstantIndexOp>().value(),
            768);
  EXPECT_EQ(parallel[1].getNumLoops(), 1u);
  EXPECT_EQ(count<mlir::scf::ForOp>(parallel[1]), 1);
  // 1 (elementwise inner) + 2 (the small nest) + 1 (reduction).
  EXPECT_EQ(count<mlir::scf::ForOp>(*module), 4);
  // The work is all still there.
  EXPECT_EQ(count<mlir::arith::MulFOp>(*module), 1);
  EXPECT_EQ(count<mlir::arith::AddFOp>(*module), 2);
  // No marker left behind.
  main(*module).walk([](mlir::scf::ParallelOp loop) {
    EXPECT_TRUE(loop->getDiscardableAttrDictionary().empty());
  });
}

// A nest inside a parallel nest, and a parallel nest in a kernel body.
constexpr const char *kNestedAndKernel = R"mlir(
func.func private @kernel(%a: memref<256x256xf32>) attributes {flowc.kernel = 0 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c256, %c256) step (%c1, %c1) {
    %v = memref.load %a[%i, %j] : memref<256x256xf32>
    memref.store %v, %a[%j, %i] : memref<256x256xf32>
    scf.reduce
  }
  return
}
func.func @main(%a: memref<256x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i) = (%c0) to (%c256) step (%c1) {
    scf.parallel (%j) = (%c0) to (%c256) step (%c1) {
      %v = memref.load %a[%i, %j] : memref<256x256xf32>
      %w = arith.negf %v : f32
      memref.store %w, %a[%i, %j] : memref<256x256xf32>
      scf.reduce
    }
    scf.reduce
  }
  call @kernel(%a) : (memref<256x256xf32>) -> ()
  return
}
)mlir";

TEST_F(PassTest, NestedNestsAndKernelBodiesRunSequentially) {
  auto module = run(kNestedAndKernel, createParallelizeLoopsPass());
  ASSERT_TRUE(module);
  EXPECT_EQ(count<mlir::scf::ParallelOp>(main(*module)), 1);
  EXPECT_EQ(count<mlir::scf::ForOp>(main(*module)), 1);
  auto kernel = module->lookupSymbol<mlir::func::FuncOp>("kernel");
  EXPECT_EQ(count<mlir::scf::ParallelOp>(kernel), 0);
  EXPECT_EQ(count<mlir::scf::ForOp>(kernel), 2);
}

// Bounds only known at run time: no way to tell the work, so one thread.
TEST_F(PassTest, DynamicBoundsRunSequentially) {
  auto module = run(R"mlir(
func.func @main(%a: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf32>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %v = memref.load %a[%i] : memref<?xf32>
    memref.store %v, %a[%i] : memref<?xf32>
    scf.reduce
  }
  return
}
)mlir",
                    createParallelizeLoopsPass());
  ASSERT_TRUE(module);
  EXPECT_EQ(count<mlir::scf::ParallelOp>(*module), 0);
  EXPECT_EQ(count<mlir::scf::ForOp>(*module), 1);
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

TEST_F(PassTest, PartitionOutlinesEachNestAndSharesIdenticalOnes) {
  auto module = run(kLoopNestsToPartition, createPartitionKernelsPass());
  ASSERT_TRUE(module);
  llvm::SmallVector<mlir::func::FuncOp> kernels;
  for (auto function : module->getOps<mlir::func::FuncOp>())
    if (function->hasAttr(kLoopKernelAttr))
      kernels.push_back(function);
  // The two scalings by 2 share one kernel; by 3 and the copy have their own.
  ASSERT_EQ(kernels.size(), 3u);
  for (mlir::func::FuncOp kernel : kernels) {
    EXPECT_TRUE(kernel.getName().starts_with(kLoopKernelPrefix))
        << kernel.getName().str();
    EXPECT_TRUE(kernel.isPrivate());
    EXPECT_EQ(count<mlir::linalg::LinalgOp>(kernel), 1);
  }
  llvm::SmallVector<mlir::func::CallOp> calls;
  main(*module).walk([&](mlir::func::CallOp call) { calls.push_back(call); });
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].getCallee(), calls[1].getCallee());
  EXPECT_NE(calls[0].getCallee(), calls[2].getCallee());
  // Constants travel inside the kernel: 2.0 and 3.0 are in their bodies.
  auto scaleBy = [&](mlir::func::CallOp call) {
    auto kernel = module->lookupSymbol<mlir::func::FuncOp>(call.getCallee());
    mlir::arith::ConstantOp constant;
    kernel.walk([&](mlir::arith::ConstantOp op) { constant = op; });
    return constant ? mlir::cast<mlir::FloatAttr>(constant.getValue()).getValueAsDouble()
                    : 0.0;
  };
  EXPECT_EQ(scaleBy(calls[0]), 2.0);
  EXPECT_EQ(scaleBy(calls[2]), 3.0);
  // The strided views are passed as they are (their layout is part of the
  // kernel's type); the dynamically sized fill stays in @main.
  EXPECT_EQ(calls[3].getNumOperands(), 2u);
  EXPECT_EQ(count<mlir::linalg::FillOp>(main(*module)), 1);
  EXPECT_EQ(count<mlir::linalg::GenericOp>(main(*module)), 0);
  EXPECT_EQ(count<mlir::linalg::CopyOp>(main(*module)), 0);

  // Split: each kernel in a module of its own, a declaration left behind.
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
  }
  EXPECT_EQ(callSites, 4);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
}

// The kernel's name depends on its IR only: the same nest in another graph,
// on other buffers, gets the same name.
TEST_F(PassTest, PartitionNamesKernelsByTheirIrAlone) {
  auto module = run(kLoopNestsToPartition, createPartitionKernelsPass());
  auto other = run(R"mlir(
#id = affine_map<(i, j) -> (i, j)>
func.func @main(%x: memref<64x64xf32>, %y: memref<64x64xf32>) {
  %c = arith.constant 3.0 : f32
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<64x64xf32>) outs(%x : memref<64x64xf32>) {
  ^bb0(%v: f32, %w: f32):
    %m = arith.mulf %v, %c : f32
    linalg.yield %m : f32
  }
  return
}
)mlir",
                   createPartitionKernelsPass());
  ASSERT_TRUE(module && other);
  mlir::func::CallOp call;
  main(*other).walk([&](mlir::func::CallOp op) { call = op; });
  ASSERT_TRUE(call);
  EXPECT_TRUE(module->lookupSymbol<mlir::func::FuncOp>(call.getCallee()));
}

} // namespace
} // namespace flowc::compiler
