#!/usr/bin/env bash
# Creates .venv-bench with the benchmark peers of bench/model_bench.py
# (PyPI's torch, torchvision, transformers, onnxruntime, OpenVINO and IREE's
# compiler and runtime, pinned), after the project's own setup. Benchmarks
# only: CI never runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [[ ! -x .venv-bench/bin/python ]]; then
  python3 -m venv .venv-bench
fi
.venv-bench/bin/pip install -q -r bench/requirements-peers.txt
