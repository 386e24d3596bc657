// Cache hot path: hashing and storing a large blob, next to sha256sum and cp
// on the same bytes in the same run. Prints figures; asserts nothing.
//
//   cache_bench [MiB=1024]
#include "flowc/cache/Cache.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <sys/resource.h>

namespace {

double seconds(const std::chrono::steady_clock::time_point &start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double timeCommand(const std::string &command) {
  auto start = std::chrono::steady_clock::now();
  if (std::system(command.c_str()) != 0)
    return -1;
  return seconds(start);
}

long peakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;
}

} // namespace

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  fs::path dir = fs::temp_directory_path() / ("flowc-cache-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string input = (dir / "blob.bin").string();
  {
    std::ofstream out(input, std::ios::binary);
    std::mt19937_64 rng(1);
    std::vector<uint64_t> chunk(1 << 17);
    for (size_t i = 0; i < mib; ++i) {
      for (auto &v : chunk)
        v = rng();
      out.write(reinterpret_cast<const char *>(chunk.data()), 1 << 20);
    }
  }
  auto file = flowc::MappedFile::open(input);
  auto cache = flowc::cache::Cache::open((dir / "cache").string());
  if (!file || !cache) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  long rssBefore = peakRssMiB();
  auto start = std::chrono::steady_clock::now();
  flowc::cache::Digest digest = flowc::cache::digestOf(file->view());
  double hashSeconds = seconds(start);
  fs::remove_all(dir / "cache");
  cache = flowc::cache::Cache::open((dir / "cache").string());
  start = std::chrono::steady_clock::now();
  auto stored = (*cache)->put(file->view());
  double putSeconds = seconds(start);
  double sha256sum = timeCommand("sha256sum '" + input + "' > /dev/null");
  double cp = timeCommand("cp '" + input + "' '" + (dir / "copy.bin").string() + "' && sync");
  double gib = static_cast<double>(mib) / 1024.0;
  std::printf("cache_bench: %zu MiB blob %s\n", mib, digest.toString().substr(0, 20).c_str());
  std::printf("  digest (OpenSSL SHA-256): %.2f GiB/s   sha256sum: %.2f GiB/s   ratio %.2fx\n",
              gib / hashSeconds, gib / sha256sum, sha256sum / hashSeconds);
  std::printf("  put (hash+write+fsync):   %.2f GiB/s   cp+sync:   %.2f GiB/s   ratio %.2fx\n",
              gib / putSeconds, gib / cp, cp / putSeconds);
  std::printf("  peak RSS: %ld MiB before, %ld MiB after (input is mmapped)\n", rssBefore,
              peakRssMiB());
  fs::remove_all(dir);
  return stored ? 0 : 1;
}
