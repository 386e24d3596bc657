// Einsum as the ops the rest of the importer builds: each operand's labels
// that nothing else reads are summed away, two operands at a time are
// contracted as one batched matrix product (transposed to [batch, kept,
// contracted] and [batch, contracted, kept]), and the result is transposed
// into the output's order. Attention written as einsum ("bhid,bhjd->bhij"),
// bilinear forms and outer products all come out as tosa.matmul.
#include "Importer.h"
#include "OpCost.h"

#include <algorithm>
#include <cctype>

namespace flowc::compiler::import {

namespace {

/// An operand's or the output's labels, one char an axis. The axes an
/// ellipsis covers get the chars '0', '1', ... from the right, so that they
/// broadcast as NumPy's do.
using Labels = std::string;

struct Equation {
  std::vector<Labels> inputs;
  Labels output;
};

constexpr size_t kMaxEllipsisAxes = 10;

/// Parses `equation` for operands of `ranks`; an error message on failure.
Expected<Equation> parseEquation(const std::string &equation,
                                 const std::vector<size_t> &ranks) {
  std::string text;
  for (char c : equation)
    if (c != ' ')
      text.push_back(c);
  size_t arrow = text.find("->");
  std::string lhs = text.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t begin = 0;;) {
    size_t comma = lhs.find(',', begin);
    terms.push_back(lhs.substr(begin, comma - begin));
    if (comma == std::string::npos)
      break;
    begin = comma + 1;
  }
  if (terms.size() != ranks.size())
    return invalidArgument("equation '" + equation + "' has " +
                           std::to_string(terms.size()) + " operands, the node " +
                           std::to_string(ranks.size()));
  auto valid = [](const std::string &term) {
    std::string rest = term;
    if (size_t dots = rest.find("..."); dots != std::string::npos)
      rest.erase(dots, 3);
    return std::all_of(rest.begin(), rest.end(), [](char c) {
      return std::isalpha(static_cast<unsigned char>(c)) != 0;
    });
  };
  Equation parsed;
  size_t ellipsisAxes = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string &term = terms[i];
    if (!valid(term))
      return invalidArgument("equation '" + equation + "': operand " + std::to_string(i) +
                             " '" + term + "' is not letters and one '...'");
    size_t dots = term.find("...");
    size_t named = term.size() - (dots == std::string::npos ? 0 : 3);
    if (named > ranks[i] || (dots == std::string::npos && named != ranks[i]))
      return invalidArgument("equation '" + equation + "': operand " + std::to_string(i) +
                             " '" + term + "' labels " + std::to_string(named) +
                             " axes of a rank-" + std::to_string(ranks[i]) + " tensor");
    size_t covered = dots == std::string::npos ? 0 : ranks[i] - named;
    if (covered > kMaxEllipsisAxes)
      return unimplemented("equation '" + equation + "': '...' covers " +
                           std::to_string(covered) + " axes, more than " +
                           std::to_string(kMaxEllipsisAxes));
    ellipsisAxes = std::max(ellipsisAxes, covered);
    Labels labels = term.substr(0, dots == std::string::npos ? term.size() : dots);
    for (size_t axis = kMaxEllipsisAxes - covered; axis < kMaxEllipsisAxes; ++axis)
      if (dots != std::string::npos)
        labels.push_back(static_cast<char>('0' + axis));
    if (dots != std::string::npos)
      labels += term.substr(dots + 3);
    parsed.inputs.push_back(labels);
  }
  Labels broadcast;
  for (size_t axis = kMaxEllipsisAxes - ellipsisAxes; axis < kMaxEllipsisAxes; ++axis)
    broadcast.push_back(static_cast<char>('0' + axis));
  if (arrow == std::string::npos) {
    // Implicit output: the ellipsis axes, then each letter used once, sorted.
    std::string once;
    for (char c = 'A'; c <= 'z'; ++c) {
      if (!std::isalpha(static_cast<unsigned char>(c)))
        continue;
      size_t uses = 0;
      for (const Labels &labels : parsed.inputs)
        uses += std::count(labels.begin(), labels.end(), c);
      if (uses == 1)
        once.push_back(c);
    }
    parsed.output = broadcast + once;
    return parsed;
  }
  std::string rhs = text.substr(arrow + 2);
  if (!valid(rhs))
    return invalidArgument("equation '" + equation + "': output '" + rhs +
                           "' is not letters and one '...'");
  size_t dots = rhs.find("...");
  parsed.output = dots == std::string::npos
                      ? rhs
                      : rhs.substr(0, dots) + broadcast + rhs.substr(dots + 3);
  for (char c : parsed.output) {
    bool read = std::any_of(parsed.inputs.begin(), parsed.inputs.end(),
                            [&](const Labels &l) { return l.find(c) != Labels::npos; });
    if (!read || std::count(parsed.output.begin(), parsed.output.end(), c) != 1)
      return invalidArgument("equation '" + equation + "': output label '" +
                             std::string(1, c) +
                             "' is repeated or names no operand's axis");
  }
  return parsed;
}

/// An operand on its way through the contraction, with its axes' labels.
struct Term {
  Value value;
  Labels labels;
};

class EinsumBuilder {
public:
  EinsumBuilder(Importer &im, const Node &node) : im_(im), node_(node) {}

  Status build();

private:
  /// Sums away the axes of `term` whose labels are not in `keep`.
  Term sumAway(Term term, const Labels &keep);
  /// `term` with its axes in `order` (a permutation of its labels).
  Term permute(Term term, const Labels &order);
  Expected<Term> contract(Term a, Term b, const Labels &keep);
  Status error(const std::string &message) { return im_.nodeError(node_, message); }

  Importer &im_;
  const Node &node_;
};

Term EinsumBuilder::sumAway(Term term, const Labels &keep) {
  Shape shape = Importer::shapeOf(term.value);
  Labels kept;
  Shape keptShape;
  for (size_t axis = 0; axis < term.labels.size(); ++axis) {
    if (keep.find(term.labels[axis]) != Labels::npos) {
      kept.push_back(term.labels[axis]);
      keptShape.push_back(shape[axis]);
      continue;
    }
    shape[axis] = 1;
    term.value = im_.build<mlir::tosa::ReduceSumOp>(
        shape, {term.value},
        {im_.attr("axis", im_.builder_.getI32IntegerAttr(static_cast<int32_t>(axis)))});
  }
  return {im_.reshape(term.value, keptShape), kept};
}

Term EinsumBuilder::permute(Term term, const Labels &order) {
  if (term.labels == order)
    return term;
  llvm::SmallVector<int32_t> perms;
  for (char c : order)
    perms.push_back(static_cast<int32_t>(term.labels.find(c)));
  return {im_.transpose(term.value, perms), order};
}

Expected<Term> EinsumBuilder::contract(Term a, Term b, const Labels &keep) {
  // A size-1 axis that the other operand has longer broadcasts: the label
  // is dropped from the operand that has it once.
  Shape as = Importer::shapeOf(a.value), bs = Importer::shapeOf(b.value);
  for (Term *side : {&a, &b}) {
    const Term &other = side == &a ? b : a;
    const Shape &mine = side == &a ? as : bs, &theirs = side == &a ? bs : as;
    Labels labels;
    Shape shape;
    for (size_t axis = 0; axis < side->labels.size(); ++axis) {
      size_t there = other.labels.find(side->labels[axis]);
      if (there != Labels::npos && mine[axis] == 1 && theirs[there] != 1)
        continue;
      labels.push_back(side->labels[axis]);
      shape.push_back(mine[axis]);
    }
    side->value = im_.reshape(side->value, shape);
    side->labels = labels;
  }
  as = Importer::shapeOf(a.value);
  bs = Importer::shapeOf(b.value);
  Labels batch, left, right, inner;
  int64_t batchSize = 1, m = 1, n = 1, k = 1;
  Shape outShape;
  for (size_t axis = 0; axis < a.labels.size(); ++axis) {
    char c = a.labels[axis];
    size_t there = b.labels.find(c);
    if (there != Labels::npos && as[axis] != bs[there])
      return error("label '" + std::string(1, c) + "' is " + std::to_string(as[axis]) +
                   " long in one operand and " + std::to_string(bs[there]) +
                   " in another");
    bool kept = keep.find(c) != Labels::npos;
    if (there == Labels::npos) {
      left.push_back(c);
      m *= as[axis];
    } else if (kept) {
      batch.push_back(c);
      batchSize *= as[axis];
    } else {
      inner.push_back(c);
      k *= as[axis];
    }
  }
  for (size_t axis = 0; axis < b.labels.size(); ++axis)
    if (a.labels.find(b.labels[axis]) == Labels::npos) {
      right.push_back(b.labels[axis]);
      n *= bs[axis];
    }
  auto sizeOf = [&](char c) {
    size_t at = a.labels.find(c);
    return at != Labels::npos ? as[at] : bs[b.labels.find(c)];
  };
  Labels result = batch + left + right;
  for (char c : result)
    outShape.push_back(sizeOf(c));
  FLOWC_RETURN_IF_ERROR(im_.checkRuntimeShape(node_, outShape));
  a = permute(a, batch + left + inner);
  b = permute(b, batch + inner + right);
  Value product = im_.matmul3d(im_.reshape(a.value, {batchSize, m, k}),
                               im_.reshape(b.value, {batchSize, k, n}));
  return Term{im_.reshape(product, outShape), result};
}

Status EinsumBuilder::build() {
  std::vector<Term> terms;
  std::vector<size_t> ranks;
  for (size_t i = 0; i < node_.inputs.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(Value v, im_.operand(node_, i));
    terms.push_back({v, {}});
    ranks.push_back(Importer::shapeOf(v).size());
  }
  auto parsed = parseEquation(stringAttr(node_, "equation", ""), ranks);
  if (!parsed)
    return parsed.status().code() == StatusCode::Unimplemented
               ? im_.nodeUnsupported(node_, parsed.status().message())
               : error(parsed.status().message());
  for (size_t i = 0; i < terms.size(); ++i) {
    const Labels &labels = parsed->inputs[i];
    for (char c : labels)
      if (std::count(labels.begin(), labels.end(), c) != 1)
        return im_.nodeUnsupported(node_,
                                   "a label repeated in one operand (a diagonal, '" +
                                       labels + "') is not supported");
    terms[i].labels = labels;
  }
  // Left to right, each product keeping the labels the output or a later
  // operand reads.
  Term acc = terms[0];
  for (size_t i = 1; i <= terms.size(); ++i) {
    Labels keep = parsed->output;
    for (size_t j = i; j < terms.size(); ++j)
      keep += terms[j].labels;
    if (i < terms.size()) {
      // A label only one side has and nothing later reads is summed first.
      Labels keepA = keep + terms[i].labels, keepB = keep + acc.labels;
      Term a = sumAway(acc, keepA), b = sumAway(terms[i], keepB);
      FLOWC_ASSIGN_OR_RETURN(acc, contract(a, b, keep));
    } else {
      acc = sumAway(acc, keep);
    }
  }
  acc = permute(acc, parsed->output);
  return im_.define(node_, acc.value);
}

/// Two FLOPs per combination of every label's values (each multiply-add
/// of the contraction), for two or more operands; one operand's sums cost
/// an add per input element.
std::optional<uint64_t> einsumFlops(const NodeRecord &record, const Node *source) {
  if (!source || record.inputs.empty())
    return std::nullopt;
  std::vector<size_t> ranks;
  for (const TensorInfo &input : record.inputs) {
    if (!hasShape(input))
      return std::nullopt;
    ranks.push_back(input.shape.size());
  }
  auto parsed = parseEquation(stringAttr(*source, "equation", ""), ranks);
  if (!parsed)
    return std::nullopt;
  if (record.inputs.size() == 1)
    return elements(record.inputs[0]);
  std::map<char, uint64_t> sizes;
  for (size_t i = 0; i < ranks.size(); ++i)
    for (size_t axis = 0; axis < ranks[i]; ++axis) {
      uint64_t size =
          static_cast<uint64_t>(std::max<int64_t>(record.inputs[i].shape[axis], 0));
      uint64_t &known = sizes[parsed->inputs[i][axis]];
      known = std::max(known, size);
    }
  uint64_t combinations = 1;
  for (const auto &[label, size] : sizes)
    combinations *= size;
  return 2 * combinations;
}

using I = Importer;

constexpr OpInfo kOps[] = {
    {.name = "Einsum",
     .sinceVersion = 12,
     .signature = {1, kAnyCount, 1, 1, /*variadic=*/true},
     .import = &I::importEinsum,
     .cost = einsumFlops},
};

} // namespace

Status Importer::importEinsum(const Node &node) {
  return EinsumBuilder(*this, node).build();
}

std::span<const OpInfo> einsumOps() { return kOps; }

} // namespace flowc::compiler::import
