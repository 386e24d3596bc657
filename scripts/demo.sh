#!/usr/bin/env bash
# README command (1): set up, build, generate the example model, compile it
# through the daemon (started on demand with embedded workers), run it and
# print its outputs; then submit again to show the cache hit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
# The demo needs only the two binaries; tests and benchmarks build with
# scripts/test.sh.
bash scripts/build.sh flowc flowcd
EXAMPLES=build/examples
export FLOWC_CACHE_DIR=${FLOWC_CACHE_DIR:-$PWD/build/demo-cache}
.venv/bin/python examples/make_models.py "$EXAMPLES"
FLOWC=build/bin/flowc
echo "== flowc inspect $EXAMPLES/cnn.onnx"
$FLOWC inspect "$EXAMPLES/cnn.onnx"
echo "== flowc submit (first time: compiles unless this cache already has it)"
$FLOWC submit "$EXAMPLES/cnn.onnx" -o "$EXAMPLES/cnn.fca"
echo "== flowc run"
$FLOWC run "$EXAMPLES/cnn.fca" --input "image=$EXAMPLES/cnn_input.npy" --output-dir "$EXAMPLES/out" --print 10
echo "== flowc submit again (unchanged model: a cache hit)"
$FLOWC submit "$EXAMPLES/cnn.onnx" -o "$EXAMPLES/cnn.fca"
$FLOWC status
