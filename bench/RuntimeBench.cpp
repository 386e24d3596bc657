// Runtime hot path: latency of Session::run on an artifact. Prints the
// median and p90 over N runs after warm-up; asserts nothing.
//
//   runtime_bench ARTIFACT NAME=INPUT.npy [ITERATIONS=50]
#include "flowc/runtime/Session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: runtime_bench ARTIFACT NAME=INPUT.npy [ITERATIONS]\n");
    return 2;
  }
  int iterations = argc > 3 ? std::atoi(argv[3]) : 50;
  std::string spec = argv[2];
  size_t eq = spec.find('=');
  auto artifact = flowc::runtime::Artifact::open(argv[1]);
  if (!artifact) {
    std::fprintf(stderr, "%s\n", artifact.status().toString().c_str());
    return 1;
  }
  auto start = std::chrono::steady_clock::now();
  auto session = flowc::runtime::Session::create(*artifact);
  double loadMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
  auto input = flowc::runtime::readNpy(spec.substr(eq + 1));
  if (!session || !input) {
    std::fprintf(stderr, "cannot load session or input\n");
    return 1;
  }
  std::map<std::string, flowc::runtime::Tensor> inputs{{spec.substr(0, eq), *input}};
  for (int i = 0; i < 5; ++i)
    (void)(*session)->run(inputs);
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    start = std::chrono::steady_clock::now();
    auto outputs = (*session)->run(inputs);
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count());
    if (!outputs)
      return 1;
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "{\"load_ms\": %.3f, \"median_ms\": %.4f, \"p90_ms\": %.4f, \"iterations\": %d}\n",
      loadMs, ms[ms.size() / 2], ms[ms.size() * 9 / 10], iterations);
  return 0;
}
