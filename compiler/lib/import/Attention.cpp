// ONNX's Attention (opset 23 and 24): scaled dot-product attention with
// its mask, causal mask, KV cache concatenation, grouped-query heads and
// softcap, as batched matrix products around a softmax. RMSNormalization
// and RotaryEmbedding (opset 23) sit here too: the other ops of the same
// LLM exports.
#include "Importer.h"
#include "OpCost.h"

namespace flowc::compiler::import {

/// A 3-D [batch, sequence, heads x size] input as [batch, heads, sequence,
/// size].
Expected<Value> Importer::splitHeads(const Node &node, Value x, int64_t heads,
                                     const char *what) {
  Shape shape = shapeOf(x);
  if (heads < 1 || shape[2] % heads != 0)
    return nodeError(node, std::string(what) + " " + shapeString(shape) +
                               " does not split into " + std::to_string(heads) +
                               " heads");
  return transpose(reshape(x, {shape[0], shape[1], heads, shape[2] / heads}),
                   {0, 2, 1, 3});
}

/// `x` ([batch, heads, n, m]) times `y` ([batch, heads / group, m, p]),
/// each of y's heads serving `group` consecutive heads of x (grouped-query
/// attention; 1 otherwise): one tosa.matmul over batch x y's heads, with
/// the group's rows of x stacked, so y is never repeated.
Value Importer::headsMatmul(Value x, Value y) {
  Shape xs = shapeOf(x), ys = shapeOf(y);
  int64_t group = xs[1] / ys[1], batch = xs[0] * ys[1];
  Value product = matmul3d(reshape(x, {batch, group * xs[2], xs[3]}),
                           reshape(y, {batch, ys[2], ys[3]}));
  return reshape(product, {xs[0], xs[1], xs[2], ys[3]});
}

Status Importer::importAttention(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value q, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value k, operand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Value v, operand(node, 2));
  size_t rank = shapeOf(q).size();
  if (rank != 3 && rank != 4)
    return nodeError(node, "Q " + shapeString(shapeOf(q)) + " is not 3-D or 4-D");
  if (shapeOf(k).size() != rank || shapeOf(v).size() != rank)
    return nodeError(node, "Q, K and V differ in rank (" + shapeString(shapeOf(q)) +
                               ", " + shapeString(shapeOf(k)) + ", " +
                               shapeString(shapeOf(v)) + ")");
  bool flat = rank == 3;
  if (flat) {
    int64_t qHeads = intAttr(node, "q_num_heads", 0),
            kvHeads = intAttr(node, "kv_num_heads", 0);
    if (qHeads < 1 || kvHeads < 1)
      return nodeError(node, "3-D inputs need q_num_heads and kv_num_heads");
    FLOWC_ASSIGN_OR_RETURN(q, splitHeads(node, q, qHeads, "Q"));
    FLOWC_ASSIGN_OR_RETURN(k, splitHeads(node, k, kvHeads, "K"));
    FLOWC_ASSIGN_OR_RETURN(v, splitHeads(node, v, kvHeads, "V"));
  }
  Shape qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
  int64_t batch = qs[0], qHeads = qs[1], qLength = qs[2], size = qs[3];
  if (ks[0] != batch || vs[0] != batch || ks[1] != vs[1] || ks[2] != vs[2] ||
      ks[3] != size)
    return nodeError(node, "K " + shapeString(ks) + " and V " + shapeString(vs) +
                               " do not fit Q " + shapeString(qs) +
                               " (as [batch, heads, sequence, head size])");
  int64_t kvHeads = ks[1];
  if (qHeads % kvHeads != 0)
    return nodeError(node, std::to_string(qHeads) +
                               " query heads are not a multiple of " +
                               std::to_string(kvHeads) + " key/value heads");
  // The KV cache: past then the incoming tokens, which are the present.
  bool past = hasOperand(node, 4) || hasOperand(node, 5);
  if (past != (hasOperand(node, 4) && hasOperand(node, 5)))
    return nodeError(node, "past_key and past_value must be given together");
  int64_t pastLength = 0;
  if (past) {
    FLOWC_ASSIGN_OR_RETURN(Value pastKey, operand(node, 4));
    FLOWC_ASSIGN_OR_RETURN(Value pastValue, operand(node, 5));
    Shape pk = shapeOf(pastKey), pv = shapeOf(pastValue);
    if (pk.size() != 4 || pv.size() != 4 || pk[0] != batch || pk[1] != kvHeads ||
        pk[3] != size || pv[0] != batch || pv[1] != kvHeads || pv[3] != vs[3] ||
        pk[2] != pv[2])
      return nodeError(node, "past_key " + shapeString(pk) + " and past_value " +
                                 shapeString(pv) + " do not fit K " + shapeString(ks) +
                                 " and V " + shapeString(vs));
    pastLength = pk[2];
    k = concatAlong({pastKey, k}, 2);
    v = concatAlong({pastValue, v}, 2);
  }
  for (size_t output : {1, 2})
    if (output < node.outputs.size() && !node.outputs[output].empty()) {
      if (!past)
        return nodeError(node,
                         "present_key and present_value need past_key and past_value");
      FLOWC_RETURN_IF_ERROR(defineOutput(node, output, output == 1 ? k : v));
    }
  int64_t total = shapeOf(k)[2];
  float scale = floatAttr(node, "scale", 1.0f / std::sqrt(static_cast<float>(size)));
  Shape scores = {batch, qHeads, qLength, total};
  Value logits = mul(headsMatmul(q, transpose(k, {0, 1, 3, 2})), scalar(scale, 4));
  Value raw = logits;
  // The bias: the mask (a bool keeps, a float adds; padded with -inf past
  // its last column), the causal mask, and the padded cache's lengths.
  float infinity = std::numeric_limits<float>::infinity();
  if (hasOperand(node, 3)) {
    FLOWC_ASSIGN_OR_RETURN(Value mask, anyOperand(node, 3));
    Shape ms = shapeOf(mask);
    if (ms.empty() || ms.size() > 4 || ms.back() > total)
      return nodeError(node, "attn_mask " + shapeString(ms) +
                                 " does not fit the scores " + shapeString(scores));
    bool keeps = elementTypeOf(mask).isInteger(1);
    if (!keeps && !elementTypeOf(mask).isF32())
      return nodeUnsupported(node, "attn_mask is " + dtypeName(dtypeOf(mask)) +
                                       " (bool and float32 are supported)");
    if (ms.back() < total) {
      Shape filler = ms;
      filler.back() = total - ms.back();
      Value fill = keeps
                       ? zeros(builder_.getI1Type(), filler)
                       : build<mlir::tosa::TileOp>(
                             filler, {scalar(-infinity, ms.size()), constShape(filler)});
      mask = concatAlong({mask, fill}, static_cast<int64_t>(ms.size()) - 1);
    }
    FLOWC_ASSIGN_OR_RETURN(mask, broadcastTo(node, mask, 4));
    FLOWC_ASSIGN_OR_RETURN(Shape biased, broadcastShape(node, scores, shapeOf(mask)));
    if (biased != scores)
      return nodeError(node, "attn_mask " + shapeString(ms) +
                                 " does not broadcast to the scores " +
                                 shapeString(scores));
    // A bool mask selects (-inf where false, as adding it would): an
    // added constant or broadcast mask is absorbed into the product's
    // oneDNN call, whose implementation for it is the slow reference one.
    logits =
        keeps ? build<mlir::tosa::SelectOp>(scores, {mask, logits, scalar(-infinity, 4)})
              : add(logits, mask);
  }
  if (intAttr(node, "is_causal", 0)) {
    // Query i (after the past) sees keys up to past + i: upper-left aligned.
    FLOWC_RETURN_IF_ERROR(reserveFolded(node, {qLength, total}).status());
    llvm::SmallVector<bool> visible;
    visible.reserve(static_cast<size_t>(qLength * total));
    for (int64_t i = 0; i < qLength; ++i)
      for (int64_t j = 0; j < total; ++j)
        visible.push_back(j <= pastLength + i);
    auto type = mlir::RankedTensorType::get({1, 1, qLength, total}, builder_.getI1Type());
    Value keep = mlir::tosa::ConstOp::create(builder_, loc_, type,
                                             mlir::DenseElementsAttr::get(type, visible));
    logits = build<mlir::tosa::SelectOp>(scores, {keep, logits, scalar(-infinity, 4)});
  }
  if (hasOperand(node, 6)) {
    FLOWC_ASSIGN_OR_RETURN(Value lengths, anyOperand(node, 6));
    if (shapeOf(lengths) != Shape{batch} || !elementTypeOf(lengths).isInteger(64))
      return nodeError(node,
                       "nonpad_kv_seqlen must be int64 [" + std::to_string(batch) + "]");
    mlir::Type i64 = builder_.getI64Type();
    FLOWC_ASSIGN_OR_RETURN(Value columns, iota(node, i64, total, 4, 3));
    Value padding =
        buildTyped<mlir::tosa::GreaterOp>(builder_.getI1Type(), {batch, 1, 1, total},
                                          {reshape(lengths, {batch, 1, 1, 1}), columns});
    logits = add(logits, build<mlir::tosa::SelectOp>(
                             {batch, 1, 1, total},
                             {padding, scalar(0.0f, 4), scalar(-infinity, 4)}));
  }
  Value biased = logits;
  float softcap = floatAttr(node, "softcap", 0.0f);
  if (softcap > 0.0f)
    logits =
        mul(build<mlir::tosa::TanhOp>(scores, {mul(logits, scalar(1.0f / softcap, 4))}),
            scalar(softcap, 4));
  Value capped = logits;
  Value weights = softmaxLastAxis(logits);
  Value y = headsMatmul(weights, v);
  if (flat) {
    Shape ys = shapeOf(y);
    y = reshape(transpose(y, {0, 2, 1, 3}), {ys[0], ys[2], ys[1] * ys[3]});
  }
  FLOWC_RETURN_IF_ERROR(defineOutput(node, 0, y));
  if (node.outputs.size() > 3 && !node.outputs[3].empty()) {
    int64_t mode = intAttr(node, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
      return nodeError(node, "qk_matmul_output_mode " + std::to_string(mode) +
                                 " is not 0, 1, 2 or 3");
    Value stages[] = {raw, biased, capped, weights};
    FLOWC_RETURN_IF_ERROR(defineOutput(node, 3, stages[mode]));
  }
  return Status::ok();
}

/// x over the root mean square of its last axes (from `axis`), times the
/// scale.
Status Importer::importRmsNormalization(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value scale, operand(node, 1));
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, -1, shape));
  int64_t outer = product(shape, 0, axis), inner = product(shape, axis, shape.size());
  Value flat = reshape(x, {outer, inner});
  Value squares = build<mlir::tosa::ReduceSumOp>(
      {outer, 1}, {mul(flat, flat)}, {attr("axis", builder_.getI32IntegerAttr(1))});
  Value meanSquare = mul(squares, scalar(1.0f / static_cast<float>(inner), 2));
  Value inverse = build<mlir::tosa::RsqrtOp>(
      {outer, 1}, {add(meanSquare, scalar(floatAttr(node, "epsilon", 1e-5f), 2))});
  Value y = reshape(mul(flat, inverse), shape);
  FLOWC_ASSIGN_OR_RETURN(scale, broadcastToInput(node, scale, shape, "scale"));
  return define(node, mul(y, scale));
}

/// RotaryEmbedding: each head's first rotary_embedding_dim values, as
/// pairs (the two halves, or neighbours when interleaved), rotated by the
/// angle whose cosine and sine the caches hold for the token's position.
Status Importer::importRotaryEmbedding(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value cos, operand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Value sin, operand(node, 2));
  Shape in = shapeOf(x);
  if (in.size() != 3 && in.size() != 4)
    return nodeError(node, "input " + shapeString(in) + " is not 3-D or 4-D");
  // As [batch, sequence, heads, head size].
  Value heads;
  if (in.size() == 4) {
    heads = transpose(x, {0, 2, 1, 3});
  } else {
    int64_t count = intAttr(node, "num_heads", 0);
    if (count < 1 || in[2] % count != 0)
      return nodeError(node, "num_heads " + std::to_string(count) +
                                 " does not split input " + shapeString(in) +
                                 " into heads");
    heads = reshape(x, {in[0], in[1], count, in[2] / count});
  }
  Shape hs = shapeOf(heads);
  int64_t batch = hs[0], length = hs[1], size = hs[3];
  int64_t rotated = intAttr(node, "rotary_embedding_dim", 0);
  if (rotated == 0)
    rotated = size;
  if (rotated < 2 || rotated > size || rotated % 2 != 0)
    return nodeError(node, "rotary_embedding_dim " + std::to_string(rotated) +
                               " is not an even number in [2, " + std::to_string(size) +
                               "]");
  int64_t half = rotated / 2;
  Shape angles = {batch, length, half};
  if (hasOperand(node, 3)) {
    FLOWC_ASSIGN_OR_RETURN(Value positions, anyOperand(node, 3));
    if (shapeOf(positions) != Shape{batch, length})
      return nodeError(
          node, "position_ids " + shapeString(shapeOf(positions)) +
                    " are not [batch, sequence] = " + shapeString({batch, length}));
    Shape cs = shapeOf(cos);
    if (cs.size() != 2 || cs[1] != half || shapeOf(sin) != cs)
      return nodeError(node, "cos_cache " + shapeString(cs) + " and sin_cache " +
                                 shapeString(shapeOf(sin)) + " are not [positions, " +
                                 std::to_string(half) + "]");
    FLOWC_ASSIGN_OR_RETURN(cos, gatherRuntime(node, cos, positions, 0, true));
    FLOWC_ASSIGN_OR_RETURN(sin, gatherRuntime(node, sin, positions, 0, true));
  } else if (shapeOf(cos) != angles || shapeOf(sin) != angles) {
    return nodeError(node, "cos_cache " + shapeString(shapeOf(cos)) + " and sin_cache " +
                               shapeString(shapeOf(sin)) + " are not " +
                               shapeString(angles) + " (without position_ids)");
  }
  cos = reshape(cos, {batch, length, 1, half});
  sin = reshape(sin, {batch, length, 1, half});
  Value turning = sliceAlong(heads, 3, 0, rotated);
  bool interleaved = intAttr(node, "interleaved", 0) != 0;
  Value first, second;
  if (interleaved) {
    Value pairs = reshape(turning, {batch, length, hs[2], half, 2});
    first = reshape(sliceAlong(pairs, 4, 0, 1), {batch, length, hs[2], half});
    second = reshape(sliceAlong(pairs, 4, 1, 1), {batch, length, hs[2], half});
  } else {
    first = sliceAlong(turning, 3, 0, half);
    second = sliceAlong(turning, 3, half, half);
  }
  Value real = sub(mul(cos, first), mul(sin, second));
  Value imaginary = add(mul(sin, first), mul(cos, second));
  Value turned;
  if (interleaved) {
    Shape lifted = {batch, length, hs[2], half, 1};
    turned = reshape(concatAlong({reshape(real, lifted), reshape(imaginary, lifted)}, 4),
                     {batch, length, hs[2], rotated});
  } else {
    turned = concatAlong({real, imaginary}, 3);
  }
  if (rotated < size)
    turned = concatAlong({turned, sliceAlong(heads, 3, rotated, size - rotated)}, 3);
  return define(node,
                in.size() == 4 ? transpose(turned, {0, 2, 1, 3}) : reshape(turned, in));
}

namespace {

/// Both products: 2 · batch · heads · q · kv · (head size + value size);
/// the softmax and bias are not counted.
std::optional<uint64_t> attentionFlops(const NodeRecord &record, const Node *) {
  if (record.inputs.size() < 3 || !hasShape(record.inputs[0]) ||
      !hasShape(record.inputs[2]) || !present(record, 0) || record.outputs.empty() ||
      !hasShape(record.outputs[0]))
    return std::nullopt;
  const auto &q = record.inputs[0].shape, &y = record.outputs[0].shape;
  if (q.size() != y.size() || q.empty())
    return std::nullopt;
  // Over all heads: Q·Kᵀ has q-elements · kv columns, P·V output-elements
  // · kv rows. kv is the value input's (plus the past's) sequence length.
  const auto &v = record.inputs[2].shape;
  uint64_t kv = static_cast<uint64_t>(v[v.size() == 4 ? 2 : 1]);
  if (present(record, 5) && hasShape(record.inputs[5]) &&
      record.inputs[5].shape.size() == 4)
    kv += static_cast<uint64_t>(record.inputs[5].shape[2]);
  return 2 * kv * (elements(record.inputs[0]) + outputElements(record));
}

using I = Importer;

// The family's op table (OpRegistry.h).
constexpr OpInfo kOps[] = {
    {.name = "Attention",
     .sinceVersion = 23,
     .untilVersion = 23,
     .signature = {3, 6, 1, 4},
     .import = &I::importAttention,
     .cost = attentionFlops},
    // nonpad_kv_seqlen
    {.name = "Attention",
     .sinceVersion = 24,
     .signature = {3, 7, 1, 4},
     .import = &I::importAttention,
     .cost = attentionFlops},
    {.name = "RotaryEmbedding",
     .sinceVersion = 23,
     .signature = {3, 4, 1, 1},
     .import = &I::importRotaryEmbedding,
     .cost = perElement<3>},
    {.name = "RMSNormalization",
     .sinceVersion = 23,
     .signature = {2, 2, 1, 1},
     .import = &I::importRmsNormalization,
     .cost = perElement<4>},
};

} // namespace

std::span<const OpInfo> attentionOps() { return kOps; }

} // namespace flowc::compiler::import
