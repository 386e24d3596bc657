#!/usr/bin/env bash
# libFuzzer runs of flowc's input readers (docs/fuzzing.md):
#   fuzz.sh TARGET MINUTES   build (if needed) and fuzz one target, e.g.
#                            `fuzz.sh onnx 10`; new inputs go to
#                            build-fuzz/corpus/TARGET, findings to
#                            build-fuzz/findings/TARGET
#   fuzz.sh --ci             every target for a fixed number of runs from the
#                            committed seeds, then every committed regression
#                            input; non-zero on any finding
# FLOWC_FUZZ_FLAGS adds libFuzzer flags to a TARGET run, e.g. "-fork=1
# -ignore_crashes=1" to keep going after a finding.
# Targets: the fuzz_*.cpp files in fuzz/ (onnx, repro, artifact, npy, ...).
# The build is build-fuzz/ (clang, ASan+UBSan, -DFLOWC_FUZZ=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${FLOWC_JOBS:-2}
CI_RUNS=${FLOWC_FUZZ_CI_RUNS:-2000}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# Leaks and UB are findings; a report carries the stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Per input: 30 s is a hang, 4 GiB (or one allocation that large) is a
# runaway size taken from the input.
LIMITS=(-timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=4096)

usage() {
  echo "usage: $0 TARGET MINUTES | --ci   (targets: $(targets | tr '\n' ' '))" >&2
  exit 2
}

targets() {
  for source in fuzz/fuzz_*.cpp; do
    name=${source#fuzz/fuzz_}
    echo "${name%.cpp}"
  done
}

build() {
  if [[ ! -f build-fuzz/build.ninja ]]; then
    cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLOWC_FUZZ=ON \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  fi
  cmake --build build-fuzz -j "$JOBS" --target "$@"
}

# Replays fuzz/regressions/TARGET/*: each input once, failing on any finding.
replay() {
  local target=$1
  local inputs=(fuzz/regressions/"$target"/*)
  [[ -e ${inputs[0]} ]] || return 0
  echo "== fuzz_$target: ${#inputs[@]} regression inputs"
  build-fuzz/bin/fuzz_"$target" "${LIMITS[@]}" "${inputs[@]}"
}

if [[ ${1:-} == --ci ]]; then
  mapfile -t all < <(targets)
  build "${all[@]/#/fuzz_}"
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  for target in "${all[@]}"; do
    echo "== fuzz_$target: $CI_RUNS runs from fuzz/corpus/$target"
    # New inputs go to the scratch dir (listed first): the seeds stay as committed.
    mkdir -p "$scratch/$target"
    build-fuzz/bin/fuzz_"$target" "${LIMITS[@]}" -runs="$CI_RUNS" -seed=1 \
      -artifact_prefix="$scratch/$target-" -print_final_stats=1 \
      "$scratch/$target" fuzz/corpus/"$target"
    replay "$target"
  done
  echo "fuzz --ci: no findings"
  exit 0
fi

[[ $# -eq 2 && $2 =~ ^[0-9]+$ && $2 -gt 0 ]] || usage
target=${1#fuzz_}
[[ -f fuzz/fuzz_$target.cpp ]] || usage
build fuzz_"$target"
corpus=build-fuzz/corpus/$target findings=build-fuzz/findings/$target
mkdir -p "$corpus" "$findings" build-fuzz/logs
replay "$target"
echo "== fuzz_$target for $2 min: corpus $corpus, findings $findings"
build-fuzz/bin/fuzz_"$target" "${LIMITS[@]}" -max_total_time=$(($2 * 60)) \
  -artifact_prefix="$findings/" -print_final_stats=1 ${FLOWC_FUZZ_FLAGS:-} \
  "$corpus" fuzz/corpus/"$target" 2>&1 | tee build-fuzz/logs/"$target".log
