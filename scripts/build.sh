#!/usr/bin/env bash
# Configures and builds flowc into build/ (binaries in build/bin/):
#   build.sh              everything (tests and benchmarks too)
#   build.sh TARGET...    only these targets, e.g. `build.sh flowc flowcd`
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${FLOWC_JOBS:-2}
# ccache hits across clones (CI's fresh clone, the fresh-machine chroot):
# paths below the checkout count relative to it, and the working directory
# is not hashed.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build build -j "$JOBS" ${1:+--target "$@"}
