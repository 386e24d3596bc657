// The model page's drawing (GraphView.h): which groups a drawing opens,
// runs of alike layers folded into one box, edges between what is drawn,
// hostile names quoted, and refusals. The dot text is checked as text, so
// these run without Graphviz; rendering it is tests/e2e/test_web_model.py's.
#include "GraphView.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace flowc::daemon {
namespace {

using nlohmann::json;

json tensor(const std::string &name, std::vector<int64_t> shape) {
  return {{"name", name}, {"dtype", "float32"}, {"shape", shape}};
}

json node(const std::string &name, const std::string &op, const std::string &input,
          const std::string &output) {
  return {{"name", name},
          {"op", op},
          {"inputs", json::array({tensor(input, {1, 8})})},
          {"outputs", json::array({tensor(output, {1, 8})})},
          {"parameters", 0},
          {"flops", 16},
          {"bytes", 32},
          {"estimated", false},
          {"folded", false},
          {"attributes", json::object()}};
}

/// `layers` alike blocks /encoder/layer.N/{fc,act}/Op, then a head.
json layeredView(int layers) {
  json nodes = json::array();
  std::string x = "input";
  for (int i = 0; i < layers; ++i) {
    std::string s = "/encoder/layer." + std::to_string(i);
    nodes.push_back(node(s + "/fc/MatMul", "MatMul", x, s + "/h"));
    nodes.push_back(node(s + "/act/Relu", "Relu", s + "/h", s + "/y"));
    x = s + "/y";
  }
  nodes.push_back(node("/head/Softmax", "Softmax", x, "output"));
  return {{"nodes", nodes},
          {"kernels", json::array()},
          {"inputs", json::array({tensor("input", {1, 8})})},
          {"outputs", json::array({tensor("output", {1, 8})})}};
}

std::set<std::string> boxIds(const std::string &dot) {
  std::set<std::string> ids;
  std::regex box(R"re(\[id="([^"]+)")re");
  for (auto it = std::sregex_iterator(dot.begin(), dot.end(), box);
       it != std::sregex_iterator(); ++it)
    ids.insert((*it)[1]);
  return ids;
}

TEST(GraphViewTest, FoldsARunOfAlikeLayersIntoOneBox) {
  auto drawing = drawGraph(layeredView(12), {});
  ASSERT_TRUE(drawing) << drawing.status().toString();
  std::set<std::string> ids = boxIds(drawing->dot);
  EXPECT_TRUE(ids.count("r:encoder/layer.0")) << drawing->dot;
  EXPECT_NE(drawing->dot.find("×11 like layer.0"), std::string::npos);
  EXPECT_EQ(drawing->nodes, 25u);
  // The first layer is drawn (within the budget), the head too.
  EXPECT_TRUE(ids.count("n24"));
  EXPECT_LE(drawing->boxes, kGraphBoxBudget);
  // Edges run from the input through the drawn boxes to the output.
  EXPECT_NE(drawing->dot.find("\"in:input\" -> "), std::string::npos);
  EXPECT_NE(drawing->dot.find("-> \"out:output\""), std::string::npos);
  EXPECT_NE(drawing->dot.find("\"r:encoder/layer.0\" -> \"n24\""), std::string::npos)
      << drawing->dot;
}

TEST(GraphViewTest, OpeningTheRunAndEveryLayerDrawsEveryNode) {
  std::set<std::string> open{"r:encoder/layer.0"};
  for (int i = 0; i < 12; ++i)
    open.insert("g:encoder/layer." + std::to_string(i));
  auto drawing = drawGraph(layeredView(12), open);
  ASSERT_TRUE(drawing);
  std::set<std::string> ids = boxIds(drawing->dot);
  for (int i = 0; i < 25; ++i)
    EXPECT_TRUE(ids.count("n" + std::to_string(i))) << i;
  EXPECT_FALSE(ids.count("r:encoder/layer.0"));
}

TEST(GraphViewTest, TwoAlikeGroupsAreNotARun) {
  // Folding one group into a box of its own saves nothing.
  auto drawing = drawGraph(layeredView(2), {});
  ASSERT_TRUE(drawing);
  for (const std::string &id : boxIds(drawing->dot))
    EXPECT_NE(id.substr(0, 2), "r:") << id;
}

TEST(GraphViewTest, HostileNamesAreQuotedAndFoldedNodesLeftOut) {
  json view = layeredView(1);
  view["nodes"][0]["name"] = "a\"] ; evil [label=\"x\\\n";
  view["nodes"][1]["folded"] = true;
  auto drawing = drawGraph(view, {});
  ASSERT_TRUE(drawing);
  EXPECT_EQ(drawing->nodes, 2u);
  // No quote ends the label early: each is escaped.
  EXPECT_EQ(drawing->dot.find("a\"]"), std::string::npos) << drawing->dot;
  EXPECT_NE(drawing->dot.find("a\\\"] ; evil [label=\\\"x\\\\\\n"), std::string::npos)
      << drawing->dot;
  EXPECT_FALSE(boxIds(drawing->dot).count("n1"));
}

TEST(GraphViewTest, RefusesWhatIsNotAViewAndTooManyBoxes) {
  EXPECT_FALSE(drawGraph(json::object(), {}));
  EXPECT_FALSE(drawGraph(json{{"nodes", json::array({42})}}, {}));
  // Flat names: no group to fold, one box per node.
  json nodes = json::array();
  for (size_t i = 0; i <= kGraphBoxLimit; ++i)
    nodes.push_back(node("n" + std::to_string(i), "Relu", "t" + std::to_string(i),
                         "t" + std::to_string(i + 1)));
  auto drawing = drawGraph({{"nodes", nodes}, {"kernels", json::array()}}, {});
  ASSERT_FALSE(drawing);
  EXPECT_EQ(drawing.status().code(), StatusCode::ResourceExhausted);
  EXPECT_NE(drawing.status().message().find("open fewer groups"), std::string::npos);
}

} // namespace
} // namespace flowc::daemon
