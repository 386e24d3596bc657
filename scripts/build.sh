#!/usr/bin/env bash
# Configures and builds flowc into build/ (binaries in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${FLOWC_JOBS:-2}
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build build -j "$JOBS"
