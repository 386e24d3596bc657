// flowc-copy-constants-to-device: see Passes.td.
#include "Partition.h"
#include "transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_COPYCONSTANTSTODEVICEPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

/// The value of every element of `global`, if they are all one.
std::optional<mlir::TypedAttr> splatValueOf(mlir::memref::GlobalOp global) {
  auto elements = mlir::dyn_cast_or_null<mlir::DenseElementsAttr>(
      global.getInitialValue().value_or(mlir::Attribute()));
  if (!elements || !elements.isSplat())
    return std::nullopt;
  return elements.getSplatValue<mlir::TypedAttr>();
}

/// Whether `use` reads the global where host code hands it over: anything
/// but a loop nest, whose kernel reads the GPU module's copy.
bool isHandedOver(mlir::OpOperand &use) {
  return !mlir::isa<mlir::linalg::LinalgOp>(use.getOwner());
}

struct CopyConstantsToDevicePass
    : impl::CopyConstantsToDevicePassBase<CopyConstantsToDevicePass> {
  void runOnOperation() override {
    mlir::func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    llvm::SmallVector<mlir::memref::GetGlobalOp> reads;
    function.walk([&](mlir::memref::GetGlobalOp read) { reads.push_back(read); });
    for (mlir::memref::GetGlobalOp read : reads)
      copyIfHandedOver(read);
  }

  void copyIfHandedOver(mlir::memref::GetGlobalOp read) {
    mlir::memref::GlobalOp global = constantGlobalOf(read);
    if (!global || llvm::none_of(read->getUses(),
                                 [](mlir::OpOperand &use) { return isHandedOver(use); }))
      return;
    mlir::OpBuilder builder(read->getContext());
    builder.setInsertionPointAfter(read);
    mlir::Location loc = read.getLoc();
    auto type = mlir::cast<mlir::MemRefType>(read.getType());
    mlir::Value copy =
        mlir::memref::AllocOp::create(builder, loc, type, builder.getI64IntegerAttr(64));
    mlir::Operation *fill = nullptr;
    if (std::optional<mlir::TypedAttr> splat = splatValueOf(global)) {
      mlir::Value value = mlir::arith::ConstantOp::create(builder, loc, *splat);
      fill = mlir::linalg::FillOp::create(builder, loc, value, copy);
    } else {
      fill = mlir::linalg::CopyOp::create(builder, loc, read.getResult(), copy);
    }
    read.getResult().replaceUsesWithIf(copy, [&](mlir::OpOperand &use) {
      return use.getOwner() != fill && isHandedOver(use);
    });
    ++constantsCopied;
  }
};

} // namespace

} // namespace flowc::compiler
