// Recurrent ops: RNN, GRU and LSTM (one layer; forward, reverse or
// bidirectional), unrolled over their time steps. ONNX fixes the sequence
// length in the input's shape, so each step is a few TOSA ops: one matrix
// product of the hidden state by R and the gates' elementwise math. The
// input's projection X·Wᵀ for all steps is one matrix product up front: the
// bulk of the work, and the part that parallelizes.
#include "Importer.h"
#include "OpCost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flowc::compiler::import {

namespace {

/// Time steps (sequence length × directions) one node may unroll into. A
/// step is ~20 ops in the IR and compile time grows a little faster than
/// the steps (1024 of an LSTM: under a minute; 4096: eight); text models
/// run tens to a few hundred steps a layer.
constexpr int64_t kMaxRecurrentSteps = 1024;

/// Multiply-adds up to which a step's product by R is a loop nest of its
/// own rather than a library call (~0.7 µs each, most of a small step).
constexpr int64_t kMaxLoopProduct = 2048;

enum class Cell { Rnn, Gru, Lstm };

Cell cellOf(const std::string &op) {
  return op == "LSTM" ? Cell::Lstm : op == "GRU" ? Cell::Gru : Cell::Rnn;
}

/// Gates stacked in W and R: RNN's one, GRU's z r h, LSTM's i o f c.
int64_t gateCount(Cell cell) {
  return cell == Cell::Lstm ? 4 : cell == Cell::Gru ? 3 : 1;
}

/// ONNX's activations per direction (f; f g; f g h) and their defaults.
std::vector<std::string> defaultActivations(Cell cell) {
  switch (cell) {
  case Cell::Lstm:
    return {"Sigmoid", "Tanh", "Tanh"};
  case Cell::Gru:
    return {"Sigmoid", "Tanh"};
  case Cell::Rnn:
    return {"Tanh"};
  }
  return {};
}

/// An activation function of the recurrent ops, with the alpha and beta it
/// takes (ONNX's list in the RNN operator's text).
struct Activation {
  std::string name;
  float alpha = 0.0f, beta = 0.0f;
};

struct ActivationDefaults {
  const char *name;
  bool takesAlpha, takesBeta;
  float alpha, beta;
};

// The defaults of the ops of the same name (Affine and ScaledTanh are the
// identity's and tanh's).
constexpr ActivationDefaults kActivations[] = {
    {"Relu", false, false, 0, 0},           {"Tanh", false, false, 0, 0},
    {"Sigmoid", false, false, 0, 0},        {"Affine", true, true, 1.0f, 0.0f},
    {"LeakyRelu", true, false, 0.01f, 0},   {"ThresholdedRelu", true, false, 1.0f, 0},
    {"ScaledTanh", true, true, 1.0f, 1.0f}, {"HardSigmoid", true, true, 0.2f, 0.5f},
    {"Elu", true, false, 1.0f, 0},          {"Softsign", false, false, 0, 0},
    {"Softplus", false, false, 0, 0},
};

/// One recurrent node's operands, validated and laid out [seq, batch, ..]
/// whatever its `layout`, and the unrolling of its directions.
class RecurrentBuilder {
public:
  RecurrentBuilder(Importer &im, const Node &node)
      : im_(im), node_(node), cell_(cellOf(node.opType)), gates_(gateCount(cell_)) {}

  Status build();

private:
  Status readAttributes();
  Status readActivations();
  Status readOperands();
  /// The input `index` (a float32 tensor) checked against `shape`.
  Expected<Value> shapedOperand(size_t index, const char *what, const Shape &shape);
  Status readSequenceLengths();
  /// Direction `d`'s slice of a [dirs, ...] value, without the first axis.
  Value ofDirection(Value v, int64_t d);
  /// A direction's operands, laid out for its steps.
  struct DirectionWeights {
    /// X·Wᵀ + biases of every step: [seq, batch, gates*hidden].
    Value xw;
    /// Rᵀ; for GRU without linear_before_reset, z's and r's columns, and
    /// h's apart (`rhT`).
    Value rT, rhT;
    /// GRU with linear_before_reset: Rbh, added inside the reset product.
    Value hiddenBias;
    /// LSTM's peepholes, [1, hidden] each.
    Value peepI, peepO, peepF;
  };
  DirectionWeights directionWeights(int64_t d);
  /// The hidden and cell states between steps; a zero one is known so.
  struct State {
    Value h, c;
    bool hZero, cZero;
  };
  /// The states after step `t` and the step's output (Y's row t).
  struct Step {
    State state;
    Value output;
  };
  Step step(const DirectionWeights &w, const std::vector<Activation> &act, int64_t t,
            const State &before);
  /// Direction `d` run over every step: its outputs at each step (Y's
  /// [seq, batch, hidden] part) and its final hidden and cell states.
  struct DirectionResult {
    Value y, h, c;
  };
  DirectionResult runDirection(int64_t d);
  Value activate(const Activation &activation, Value x);
  Value clipped(Value x);
  /// [batch, n] = [batch, k] · [k, n].
  Value matmul2d(Value a, Value b);
  /// A step's product of the state by R: a library call costs more than
  /// a small product itself, which runs as loops fused with the gates.
  Value stepProduct(Value h, Value rT);
  Value gate(Value stacked, int64_t index);
  /// Where step `t` is past a sequence's length: the old state is kept.
  Value keepPastLength(int64_t t, Value updated, Value old);

  Importer &im_;
  const Node &node_;
  Cell cell_;
  int64_t gates_;
  int64_t seq_ = 0, batch_ = 0, inputSize_ = 0, hidden_ = 0, dirs_ = 1;
  bool reverse_ = false, batchFirst_ = false, linearBeforeReset_ = false,
       inputForget_ = false;
  std::optional<float> clip_;
  /// Per direction: f (g, h).
  std::vector<std::vector<Activation>> activations_;
  Value x_, w_, r_, b_, initialH_, initialC_, peepholes_;
  /// int32 [batch, 1]; null when every sequence is seq_ long.
  Value lengths_;
  /// [batch, hidden] zeros: the absent initial states, Y past a length.
  Value zeros_;
};

Status RecurrentBuilder::readAttributes() {
  std::string direction = stringAttr(node_, "direction", "forward");
  if (direction == "bidirectional")
    dirs_ = 2;
  else if (direction == "reverse")
    reverse_ = true;
  else if (direction != "forward")
    return im_.nodeError(node_, "direction '" + direction +
                                    "' is none of forward, reverse, bidirectional");
  int64_t layout = intAttr(node_, "layout", 0);
  if (layout != 0 && layout != 1)
    return im_.nodeError(node_,
                         "layout " + std::to_string(layout) + " is neither 0 nor 1");
  batchFirst_ = layout == 1;
  linearBeforeReset_ =
      cell_ == Cell::Gru && intAttr(node_, "linear_before_reset", 0) != 0;
  inputForget_ = cell_ == Cell::Lstm && intAttr(node_, "input_forget", 0) != 0;
  if (node_.attributes.count("clip")) {
    float clip = floatAttr(node_, "clip", 0.0f);
    if (!(clip > 0.0f))
      return im_.nodeError(node_, "clip " + std::to_string(clip) + " is not positive");
    clip_ = clip;
  }
  return readActivations();
}

Status RecurrentBuilder::readActivations() {
  std::vector<std::string> names = defaultActivations(cell_);
  size_t perDirection = names.size();
  if (auto it = node_.attributes.find("activations"); it != node_.attributes.end())
    names = it->second.strings;
  // onnxruntime takes one direction's list for both directions too.
  if (dirs_ == 2 && names.size() == perDirection) {
    std::vector<std::string> forward = names;
    names.insert(names.end(), forward.begin(), forward.end());
  }
  if (names.size() != perDirection * static_cast<size_t>(dirs_))
    return im_.nodeError(node_, "activations lists " + std::to_string(names.size()) +
                                    " functions, the op takes " +
                                    std::to_string(perDirection) + " per direction");
  auto floats = [&](const char *name) {
    auto it = node_.attributes.find(name);
    return it == node_.attributes.end() ? std::vector<float>{} : it->second.floats;
  };
  std::vector<float> alphas = floats("activation_alpha"),
                     betas = floats("activation_beta");
  size_t nextAlpha = 0, nextBeta = 0;
  activations_.assign(dirs_, {});
  for (size_t i = 0; i < names.size(); ++i) {
    const ActivationDefaults *known = nullptr;
    for (const ActivationDefaults &candidate : kActivations)
      if (llvm::StringRef(names[i]).equals_insensitive(candidate.name))
        known = &candidate;
    if (!known)
      return im_.nodeUnsupported(node_, "activation '" + names[i] + "' is not supported");
    // Alphas and betas are consumed in order by the functions that take one.
    Activation activation{known->name, known->alpha, known->beta};
    if (known->takesAlpha && nextAlpha < alphas.size())
      activation.alpha = alphas[nextAlpha++];
    if (known->takesBeta && nextBeta < betas.size())
      activation.beta = betas[nextBeta++];
    activations_[i / perDirection].push_back(activation);
  }
  return Status::ok();
}

Expected<Value> RecurrentBuilder::shapedOperand(size_t index, const char *what,
                                                const Shape &shape) {
  FLOWC_ASSIGN_OR_RETURN(Value v, im_.operand(node_, index));
  if (Importer::shapeOf(v) != shape)
    return im_.nodeError(node_, std::string(what) + " is " +
                                    shapeString(Importer::shapeOf(v)) + ", expected " +
                                    shapeString(shape));
  return v;
}

Status RecurrentBuilder::readOperands() {
  FLOWC_ASSIGN_OR_RETURN(x_, im_.operand(node_, 0));
  Shape xs = Importer::shapeOf(x_);
  if (xs.size() != 3)
    return im_.nodeError(node_, "X must be 3-D, got " + shapeString(xs));
  if (batchFirst_)
    x_ = im_.transpose(x_, {1, 0, 2});
  xs = Importer::shapeOf(x_);
  seq_ = xs[0];
  batch_ = xs[1];
  inputSize_ = xs[2];
  FLOWC_ASSIGN_OR_RETURN(Value r, im_.operand(node_, 2));
  Shape rs = Importer::shapeOf(r);
  if (rs.size() != 3 || rs[0] != dirs_ || rs[2] <= 0 || rs[1] != gates_ * rs[2])
    return im_.nodeError(
        node_, "R is " + shapeString(rs) + ", expected [" + std::to_string(dirs_) + ", " +
                   std::to_string(gates_) + "*hidden_size, hidden_size]");
  hidden_ = rs[2];
  if (int64_t given = intAttr(node_, "hidden_size", hidden_); given != hidden_)
    return im_.nodeError(node_, "hidden_size " + std::to_string(given) +
                                    " differs from R's " + shapeString(rs));
  r_ = r;
  if (seq_ * dirs_ > kMaxRecurrentSteps)
    return im_.nodeUnsupported(node_, std::to_string(seq_) + " steps x " +
                                          std::to_string(dirs_) +
                                          " directions unroll past the limit of " +
                                          std::to_string(kMaxRecurrentSteps) + " steps");
  int64_t stacked = gates_ * hidden_;
  FLOWC_ASSIGN_OR_RETURN(w_, shapedOperand(1, "W", {dirs_, stacked, inputSize_}));
  if (im_.hasOperand(node_, 3)) {
    FLOWC_ASSIGN_OR_RETURN(b_, shapedOperand(3, "B", {dirs_, 2 * stacked}));
  }
  Shape state =
      batchFirst_ ? Shape{batch_, dirs_, hidden_} : Shape{dirs_, batch_, hidden_};
  if (im_.hasOperand(node_, 5)) {
    FLOWC_ASSIGN_OR_RETURN(initialH_, shapedOperand(5, "initial_h", state));
    if (batchFirst_)
      initialH_ = im_.transpose(initialH_, {1, 0, 2});
  }
  if (cell_ == Cell::Lstm && im_.hasOperand(node_, 6)) {
    FLOWC_ASSIGN_OR_RETURN(initialC_, shapedOperand(6, "initial_c", state));
    if (batchFirst_)
      initialC_ = im_.transpose(initialC_, {1, 0, 2});
  }
  if (cell_ == Cell::Lstm && im_.hasOperand(node_, 7)) {
    FLOWC_ASSIGN_OR_RETURN(peepholes_, shapedOperand(7, "P", {dirs_, 3 * hidden_}));
  }
  return readSequenceLengths();
}

Status RecurrentBuilder::readSequenceLengths() {
  if (!im_.hasOperand(node_, 4))
    return Status::ok();
  const std::string &name = node_.inputs[4];
  auto known = im_.intConstant(name);
  if (known) {
    if (known->shape != Shape{batch_})
      return im_.nodeError(node_, "sequence_lens is " + shapeString(known->shape) +
                                      ", expected [" + std::to_string(batch_) + "]");
    for (size_t i = 0; i < known->values.size(); ++i)
      if (known->values[i] < 1 || known->values[i] > seq_)
        return im_.nodeError(node_, "sequence_lens[" + std::to_string(i) +
                                        "] = " + std::to_string(known->values[i]) +
                                        " is outside [1, " + std::to_string(seq_) + "]");
    // Full-length sequences need no masking.
    if (std::all_of(known->values.begin(), known->values.end(),
                    [&](int64_t n) { return n == seq_; }))
      return Status::ok();
  }
  FLOWC_ASSIGN_OR_RETURN(Value lengths, im_.anyOperand(node_, 4));
  mlir::Type type = Importer::elementTypeOf(lengths);
  if (!type.isInteger(32) && !type.isInteger(64))
    return im_.nodeError(node_, "sequence_lens must be int32");
  if (Importer::shapeOf(lengths) != Shape{batch_})
    return im_.nodeError(node_, "sequence_lens is " +
                                    shapeString(Importer::shapeOf(lengths)) +
                                    ", expected [" + std::to_string(batch_) + "]");
  if (type.isInteger(64))
    lengths = im_.buildTyped<mlir::tosa::CastOp>(im_.builder_.getI32Type(), {batch_},
                                                 {lengths});
  lengths = im_.reshape(lengths, {batch_, 1});
  // Run-time lengths are checked as onnxruntime checks them (constant
  // ones were, above).
  if (!known) {
    mlir::Type flag = im_.builder_.getI1Type();
    Value tooShort = im_.buildTyped<mlir::tosa::GreaterOp>(
        flag, {batch_, 1}, {im_.integer(im_.builder_.getI32Type(), 1, 2), lengths});
    Value tooLong = im_.buildTyped<mlir::tosa::GreaterOp>(
        flag, {batch_, 1}, {lengths, im_.integer(im_.builder_.getI32Type(), seq_, 2)});
    im_.failRunIf(
        node_,
        im_.buildTyped<mlir::tosa::LogicalOrOp>(flag, {batch_, 1}, {tooShort, tooLong}),
        "a sequence_lens value is outside [1, " + std::to_string(seq_) + "]");
  }
  lengths_ = lengths;
  return Status::ok();
}

Value RecurrentBuilder::ofDirection(Value v, int64_t d) {
  Shape shape = Importer::shapeOf(v);
  Value part = im_.sliceAlong(v, 0, d, 1);
  return im_.reshape(part, Shape(shape.begin() + 1, shape.end()));
}

Value RecurrentBuilder::matmul2d(Value a, Value b) {
  Shape as = Importer::shapeOf(a), bs = Importer::shapeOf(b);
  Value product =
      im_.matmul3d(im_.reshape(a, {1, as[0], as[1]}), im_.reshape(b, {1, bs[0], bs[1]}));
  return im_.reshape(product, {as[0], bs[1]});
}

Value RecurrentBuilder::stepProduct(Value h, Value rT) {
  Shape hs = Importer::shapeOf(h), rs = Importer::shapeOf(rT);
  if (hs[0] * hs[1] * rs[1] > kMaxLoopProduct)
    return matmul2d(h, rT);
  // [batch, hidden, 1] ⊙ [1, hidden, n], summed over hidden.
  Value terms =
      im_.mul(im_.reshape(h, {hs[0], hs[1], 1}), im_.reshape(rT, {1, rs[0], rs[1]}));
  Value sum = im_.build<mlir::tosa::ReduceSumOp>(
      {hs[0], 1, rs[1]}, {terms}, {im_.attr("axis", im_.builder_.getI32IntegerAttr(1))});
  return im_.reshape(sum, {hs[0], rs[1]});
}

Value RecurrentBuilder::gate(Value stacked, int64_t index) {
  return im_.sliceAlong(stacked, 1, index * hidden_, hidden_);
}

Value RecurrentBuilder::clipped(Value x) {
  return clip_ ? im_.clamp(x, -*clip_, *clip_) : x;
}

Value RecurrentBuilder::activate(const Activation &activation, Value x) {
  Shape shape = Importer::shapeOf(x);
  size_t rank = shape.size();
  const std::string &name = activation.name;
  auto scaled = [&](Value v, float by) { return im_.mul(v, im_.scalar(by, rank)); };
  auto where = [&](Value condition, Value a, Value b) {
    return im_.build<mlir::tosa::SelectOp>(shape, {condition, a, b});
  };
  auto atLeast = [&](Value v, float bound, bool strictly) {
    Value limit = im_.scalar(bound, rank);
    mlir::Type flag = im_.builder_.getI1Type();
    return strictly ? im_.buildTyped<mlir::tosa::GreaterOp>(flag, shape, {v, limit})
                    : im_.buildTyped<mlir::tosa::GreaterEqualOp>(flag, shape, {v, limit});
  };
  if (name == "Relu")
    return im_.clamp(x, 0.0f, std::numeric_limits<float>::infinity());
  if (name == "Tanh")
    return im_.build<mlir::tosa::TanhOp>(shape, {x});
  if (name == "Sigmoid")
    return im_.build<mlir::tosa::SigmoidOp>(shape, {x});
  if (name == "Affine")
    return im_.add(scaled(x, activation.alpha), im_.scalar(activation.beta, rank));
  if (name == "LeakyRelu")
    return where(atLeast(x, 0.0f, false), x, scaled(x, activation.alpha));
  if (name == "ThresholdedRelu")
    return where(atLeast(x, activation.alpha, true), x, im_.scalar(0.0f, rank));
  if (name == "ScaledTanh")
    return scaled(im_.build<mlir::tosa::TanhOp>(shape, {scaled(x, activation.beta)}),
                  activation.alpha);
  if (name == "HardSigmoid")
    return im_.clamp(
        im_.add(scaled(x, activation.alpha), im_.scalar(activation.beta, rank)), 0.0f,
        1.0f);
  if (name == "Elu") {
    Value expm1 =
        im_.sub(im_.build<mlir::tosa::ExpOp>(shape, {x}), im_.scalar(1.0f, rank));
    return where(atLeast(x, 0.0f, false), x, scaled(expm1, activation.alpha));
  }
  Value magnitude = im_.build<mlir::tosa::AbsOp>(shape, {x});
  if (name == "Softsign")
    return im_.mul(x, im_.build<mlir::tosa::ReciprocalOp>(
                          shape, {im_.add(magnitude, im_.scalar(1.0f, rank))}));
  // Softplus as max(x, 0) + log(1 + exp(-|x|)): exp(x) overflows past 88.
  Value tail = im_.build<mlir::tosa::LogOp>(
      shape, {im_.add(im_.build<mlir::tosa::ExpOp>(shape, {scaled(magnitude, -1.0f)}),
                      im_.scalar(1.0f, rank))});
  return im_.add(im_.clamp(x, 0.0f, std::numeric_limits<float>::infinity()), tail);
}

Value RecurrentBuilder::keepPastLength(int64_t t, Value updated, Value old) {
  if (!lengths_)
    return updated;
  mlir::Type flag = im_.builder_.getI1Type();
  Value within = im_.buildTyped<mlir::tosa::GreaterOp>(
      flag, {batch_, 1}, {lengths_, im_.integer(im_.builder_.getI32Type(), t, 2)});
  return im_.build<mlir::tosa::SelectOp>(Importer::shapeOf(updated),
                                         {within, updated, old});
}

RecurrentBuilder::DirectionWeights RecurrentBuilder::directionWeights(int64_t d) {
  int64_t stacked = gates_ * hidden_;
  DirectionWeights w;
  // All steps' X·Wᵀ + biases in one product: [seq, batch, gates*hidden].
  Value wT = im_.transpose(ofDirection(w_, d), {1, 0});
  w.xw = matmul2d(im_.reshape(x_, {seq_ * batch_, inputSize_}), wT);
  if (b_) {
    Value bias = ofDirection(b_, d);
    Value wb = im_.sliceAlong(bias, 0, 0, stacked);
    Value rb = im_.sliceAlong(bias, 0, stacked, stacked);
    Value both = im_.add(wb, rb);
    // GRU with linear_before_reset keeps Rbh inside the reset gate's product.
    if (linearBeforeReset_) {
      w.hiddenBias =
          im_.reshape(im_.sliceAlong(rb, 0, 2 * hidden_, hidden_), {1, hidden_});
      both = im_.concatAlong({im_.sliceAlong(both, 0, 0, 2 * hidden_),
                              im_.sliceAlong(wb, 0, 2 * hidden_, hidden_)},
                             0);
    }
    w.xw = im_.add(w.xw, im_.reshape(both, {1, stacked}));
  }
  w.xw = im_.reshape(w.xw, {seq_, batch_, stacked});
  w.rT = im_.transpose(ofDirection(r_, d), {1, 0}); // [hidden, gates*hidden]
  // GRU without linear_before_reset multiplies (r ⊙ H) by Rh apart.
  if (cell_ == Cell::Gru && !linearBeforeReset_) {
    w.rhT = im_.sliceAlong(w.rT, 1, 2 * hidden_, hidden_);
    w.rT = im_.sliceAlong(w.rT, 1, 0, 2 * hidden_);
  }
  if (peepholes_) {
    Value p = ofDirection(peepholes_, d);
    auto part = [&](int64_t i) {
      return im_.reshape(im_.sliceAlong(p, 0, i * hidden_, hidden_), {1, hidden_});
    };
    w.peepI = part(0);
    w.peepO = part(1);
    w.peepF = part(2);
  }
  return w;
}

RecurrentBuilder::Step RecurrentBuilder::step(const DirectionWeights &w,
                                              const std::vector<Activation> &act,
                                              int64_t t, const State &before) {
  Value xt = im_.reshape(im_.sliceAlong(w.xw, 0, t, 1), {batch_, gates_ * hidden_});
  Value h = before.h, c = before.c;
  // A zero state needs no product by R (the first step without initial_h).
  Value hr = before.hZero ? Value() : stepProduct(h, w.rT);
  auto pre = [&](int64_t index) {
    Value g = gate(xt, index);
    return hr ? im_.add(g, gate(hr, index)) : g;
  };
  Value nextH, nextC;
  if (cell_ == Cell::Rnn) {
    nextH = activate(act[0], clipped(pre(0)));
  } else if (cell_ == Cell::Gru) {
    Value z = activate(act[0], clipped(pre(0)));
    Value r = activate(act[0], clipped(pre(1)));
    Value candidate = gate(xt, 2);
    if (linearBeforeReset_) {
      Value recurrent = hr ? gate(hr, 2) : zeros_;
      if (w.hiddenBias)
        recurrent = im_.add(recurrent, w.hiddenBias);
      candidate = im_.add(candidate, im_.mul(r, recurrent));
    } else if (!before.hZero) {
      candidate = im_.add(candidate, stepProduct(im_.mul(r, h), w.rhT));
    }
    Value hTilde = activate(act[1], clipped(candidate));
    // (1 - z) ⊙ h~ + z ⊙ H = h~ + z ⊙ (H - h~)
    nextH = im_.add(hTilde, im_.mul(z, im_.sub(h, hTilde)));
  } else {
    Value i = pre(0), o = pre(1), f = pre(2), g = pre(3);
    if (w.peepI && !before.cZero) {
      i = im_.add(i, im_.mul(w.peepI, c));
      f = im_.add(f, im_.mul(w.peepF, c));
    }
    i = activate(act[0], clipped(i));
    f = inputForget_ ? im_.sub(im_.scalar(1.0f, 2), i) : activate(act[0], clipped(f));
    g = activate(act[1], clipped(g));
    nextC = im_.add(im_.mul(f, c), im_.mul(i, g));
    if (w.peepO)
      o = im_.add(o, im_.mul(w.peepO, nextC));
    o = activate(act[0], clipped(o));
    nextH = im_.mul(o, activate(act[2], nextC));
  }
  Value keptC = cell_ == Cell::Lstm ? keepPastLength(t, nextC, c) : c;
  State after{keepPastLength(t, nextH, h), keptC, false, false};
  return {after, keepPastLength(t, nextH, zeros_)};
}

RecurrentBuilder::DirectionResult RecurrentBuilder::runDirection(int64_t d) {
  DirectionWeights w = directionWeights(d);
  State state{initialH_ ? ofDirection(initialH_, d) : zeros_,
              initialC_ ? ofDirection(initialC_, d) : zeros_, !initialH_, !initialC_};
  bool backwards = reverse_ || d == 1;
  std::vector<Value> outputs(seq_);
  for (int64_t i = 0; i < seq_; ++i) {
    int64_t t = backwards ? seq_ - 1 - i : i;
    Step next = step(w, activations_[d], t, state);
    state = next.state;
    outputs[t] = next.output;
  }
  DirectionResult result{Value(), state.h, state.c};
  if (!node_.outputs.empty() && !node_.outputs[0].empty()) {
    for (Value &y : outputs)
      y = im_.reshape(y, {1, batch_, hidden_});
    result.y = im_.concatAlong(outputs, 0);
  }
  return result;
}

Status RecurrentBuilder::build() {
  FLOWC_RETURN_IF_ERROR(readAttributes());
  FLOWC_RETURN_IF_ERROR(readOperands());
  Shape yShape = batchFirst_ ? Shape{batch_, seq_, dirs_, hidden_}
                             : Shape{seq_, dirs_, batch_, hidden_};
  FLOWC_RETURN_IF_ERROR(im_.checkRuntimeShape(node_, yShape));
  zeros_ = im_.zeros(im_.builder_.getF32Type(), {batch_, hidden_});
  std::vector<Value> ys, hs, cs;
  for (int64_t d = 0; d < dirs_; ++d) {
    DirectionResult result = runDirection(d);
    if (result.y)
      ys.push_back(im_.reshape(result.y, {seq_, 1, batch_, hidden_}));
    hs.push_back(im_.reshape(result.h, {1, batch_, hidden_}));
    cs.push_back(im_.reshape(result.c, {1, batch_, hidden_}));
  }
  // [dirs, batch, hidden] states; batch first under layout 1.
  auto states = [&](llvm::ArrayRef<Value> parts) {
    Value joined = im_.concatAlong(parts, 0);
    return batchFirst_ ? im_.transpose(joined, {1, 0, 2}) : joined;
  };
  if (!ys.empty()) {
    Value y = im_.concatAlong(ys, 1);
    FLOWC_RETURN_IF_ERROR(
        im_.defineOutput(node_, 0, batchFirst_ ? im_.transpose(y, {2, 0, 1, 3}) : y));
  }
  if (node_.outputs.size() > 1)
    FLOWC_RETURN_IF_ERROR(im_.defineOutput(node_, 1, states(hs)));
  if (cell_ == Cell::Lstm && node_.outputs.size() > 2)
    FLOWC_RETURN_IF_ERROR(im_.defineOutput(node_, 2, states(cs)));
  return Status::ok();
}

/// Per step and direction: the products by W (done for all steps at once)
/// and R, and about ten elementwise ops per hidden unit.
std::optional<uint64_t> recurrentFlops(const NodeRecord &record, const Node *) {
  if (record.inputs.size() < 3 || !hasShape(record.inputs[0]) ||
      !hasShape(record.inputs[2]) || record.inputs[0].shape.size() != 3 ||
      record.inputs[2].shape.size() != 3)
    return std::nullopt;
  const Shape &r = record.inputs[2].shape;
  uint64_t inputSize =
      static_cast<uint64_t>(std::max<int64_t>(record.inputs[0].shape[2], 1));
  uint64_t rows = elements(record.inputs[0]) / inputSize; // seq × batch
  uint64_t dirs = static_cast<uint64_t>(r[0]), stacked = static_cast<uint64_t>(r[1]),
           hidden = static_cast<uint64_t>(r[2]);
  return dirs * rows * (2 * stacked * (inputSize + hidden) + 10 * hidden);
}

using I = Importer;

// The family's op table (OpRegistry.h). Opset 1's RNN ops carried
// output_sequence and other defaults; 7 is the form exporters write.
constexpr OpInfo kOps[] = {
    {.name = "GRU",
     .sinceVersion = 7,
     .signature = {3, 6, 0, 2},
     .import = &I::importRecurrent,
     .cost = recurrentFlops},
    {.name = "LSTM",
     .sinceVersion = 7,
     .signature = {3, 8, 0, 3},
     .import = &I::importRecurrent,
     .cost = recurrentFlops},
    {.name = "RNN",
     .sinceVersion = 7,
     .signature = {3, 6, 0, 2},
     .import = &I::importRecurrent,
     .cost = recurrentFlops},
};

} // namespace

Status Importer::importRecurrent(const Node &node) {
  return RecurrentBuilder(*this, node).build();
}

std::span<const OpInfo> recurrentOps() { return kOps; }

} // namespace flowc::compiler::import
