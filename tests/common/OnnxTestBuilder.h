// Builds ONNX ModelProto bytes for tests with a small protobuf encoder, so
// the C++ tests need no Python and can also produce broken models on purpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace flowc::testing {

class ProtoWriter {
public:
  ProtoWriter &varint(uint32_t field, uint64_t value) {
    tag(field, 0);
    raw(value);
    return *this;
  }
  ProtoWriter &bytes(uint32_t field, const std::string &value) {
    tag(field, 2);
    raw(value.size());
    out_ += value;
    return *this;
  }
  ProtoWriter &fixed32(uint32_t field, uint32_t value) {
    tag(field, 5);
    out_.append(reinterpret_cast<const char *>(&value), 4);
    return *this;
  }
  const std::string &str() const { return out_; }

private:
  void tag(uint32_t field, uint32_t type) { raw(uint64_t(field) << 3 | type); }
  void raw(uint64_t value) {
    do {
      uint8_t byte = value & 0x7f;
      value >>= 7;
      out_.push_back(static_cast<char>(byte | (value ? 0x80 : 0)));
    } while (value);
  }
  std::string out_;
};

inline std::string floatTensor(const std::string &name, const std::vector<int64_t> &dims,
                               const std::vector<float> &values) {
  ProtoWriter w;
  for (int64_t d : dims)
    w.varint(1, static_cast<uint64_t>(d));
  w.varint(2, 1);
  w.bytes(8, name);
  w.bytes(9,
          std::string(reinterpret_cast<const char *>(values.data()), values.size() * 4));
  return w.str();
}

inline std::string int64Tensor(const std::string &name,
                               const std::vector<int64_t> &values) {
  ProtoWriter w;
  w.varint(1, values.size());
  w.varint(2, 7);
  w.bytes(8, name);
  w.bytes(9,
          std::string(reinterpret_cast<const char *>(values.data()), values.size() * 8));
  return w.str();
}

inline std::string intsAttribute(const std::string &name,
                                 const std::vector<int64_t> &values) {
  ProtoWriter w;
  w.bytes(1, name);
  for (int64_t v : values)
    w.varint(8, static_cast<uint64_t>(v));
  w.varint(20, 7);
  return w.str();
}

/// An int64 tensor of any shape (`values` row-major).
inline std::string int64TensorOfShape(const std::string &name,
                                      const std::vector<int64_t> &dims,
                                      const std::vector<int64_t> &values) {
  ProtoWriter w;
  for (int64_t d : dims)
    w.varint(1, static_cast<uint64_t>(d));
  w.varint(2, 7);
  w.bytes(8, name);
  w.bytes(9,
          std::string(reinterpret_cast<const char *>(values.data()), values.size() * 8));
  return w.str();
}

inline std::string floatAttribute(const std::string &name, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  ProtoWriter w;
  w.bytes(1, name).fixed32(2, bits).varint(20, 1);
  return w.str();
}

inline std::string stringAttribute(const std::string &name, const std::string &value) {
  ProtoWriter w;
  w.bytes(1, name).bytes(4, value).varint(20, 3);
  return w.str();
}

/// A TENSOR attribute holding `tensor` (TensorProto bytes).
inline std::string tensorAttribute(const std::string &name, const std::string &tensor) {
  ProtoWriter w;
  w.bytes(1, name).bytes(5, tensor).varint(20, 4);
  return w.str();
}

inline std::string intAttribute(const std::string &name, int64_t value) {
  ProtoWriter w;
  w.bytes(1, name).varint(3, static_cast<uint64_t>(value)).varint(20, 2);
  return w.str();
}

inline std::string node(const std::string &opType, const std::vector<std::string> &inputs,
                        const std::vector<std::string> &outputs, const std::string &name,
                        const std::vector<std::string> &attributes = {}) {
  ProtoWriter w;
  for (const auto &i : inputs)
    w.bytes(1, i);
  for (const auto &o : outputs)
    w.bytes(2, o);
  w.bytes(3, name);
  w.bytes(4, opType);
  for (const auto &a : attributes)
    w.bytes(5, a);
  return w.str();
}

inline std::string valueInfo(const std::string &name, const std::vector<int64_t> &dims) {
  ProtoWriter shape;
  for (int64_t d : dims)
    shape.bytes(1, ProtoWriter().varint(1, static_cast<uint64_t>(d)).str());
  ProtoWriter tensorType;
  tensorType.varint(1, 1).bytes(2, shape.str());
  ProtoWriter type;
  type.bytes(1, tensorType.str());
  ProtoWriter info;
  info.bytes(1, name).bytes(2, type.str());
  return info.str();
}

struct GraphSpec {
  std::vector<std::string> nodes;
  std::vector<std::string> initializers;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  int64_t opset = 17;
  int64_t irVersion = 8;
};

inline std::string model(const GraphSpec &spec) {
  ProtoWriter graph;
  for (const auto &n : spec.nodes)
    graph.bytes(1, n);
  graph.bytes(2, "test_graph");
  for (const auto &t : spec.initializers)
    graph.bytes(5, t);
  for (const auto &i : spec.inputs)
    graph.bytes(11, i);
  for (const auto &o : spec.outputs)
    graph.bytes(12, o);
  ProtoWriter opset;
  opset.bytes(1, "").varint(2, static_cast<uint64_t>(spec.opset));
  ProtoWriter m;
  m.varint(1, static_cast<uint64_t>(spec.irVersion))
      .bytes(2, "flowc-tests")
      .bytes(7, graph.str())
      .bytes(8, opset.str());
  return m.str();
}

/// y[2,3] = relu(x[2,4] @ W[4,3] + b[3]) with fixed weights scaled by `scale`.
inline std::string denseReluModel(float scale = 1.0f) {
  std::vector<float> w(12), b = {0.5f * scale, -1.0f * scale, 0.25f * scale};
  for (int i = 0; i < 12; ++i)
    w[i] = (static_cast<float>(i) - 5.5f) * 0.1f * scale;
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {4, 3}, w), floatTensor("b", {3}, b)};
  spec.nodes = {node("MatMul", {"x", "W"}, {"h"}, "dense"),
                node("Add", {"h", "b"}, {"hb"}, "bias"),
                node("Relu", {"hb"}, {"y"}, "relu")};
  spec.inputs = {valueInfo("x", {2, 4})};
  spec.outputs = {valueInfo("y", {2, 3})};
  return model(spec);
}

/// Reference for denseReluModel on input `x` (row-major [2,4]).
inline std::vector<float> denseReluReference(const std::vector<float> &x,
                                             float scale = 1.0f) {
  std::vector<float> y(6);
  float b[3] = {0.5f * scale, -1.0f * scale, 0.25f * scale};
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      float acc = b[c];
      for (int k = 0; k < 4; ++k)
        acc += x[r * 4 + k] * (static_cast<float>(k * 3 + c) - 5.5f) * 0.1f * scale;
      y[r * 3 + c] = acc > 0 ? acc : 0;
    }
  return y;
}

/// Twice "center each row of x[8, columns], then Relu", then `last`
/// (Sigmoid or Tanh): the two centering blocks are identical loop nests.
inline std::string centeringModel(const std::string &last, int64_t columns = 4096) {
  GraphSpec spec;
  spec.nodes = {node("ReduceMean", {"x"}, {"m1"}, "mean1", {intsAttribute("axes", {1})}),
                node("Sub", {"x", "m1"}, {"c1"}, "sub1"),
                node("Relu", {"c1"}, {"r1"}, "relu1"),
                node("ReduceMean", {"r1"}, {"m2"}, "mean2", {intsAttribute("axes", {1})}),
                node("Sub", {"r1", "m2"}, {"c2"}, "sub2"),
                node("Relu", {"c2"}, {"r2"}, "relu2"),
                node(last, {"r2"}, {"y"}, "last")};
  spec.inputs = {valueInfo("x", {8, columns})};
  spec.outputs = {valueInfo("y", {8, columns})};
  return model(spec);
}

inline void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

} // namespace flowc::testing
