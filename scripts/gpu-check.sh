#!/usr/bin/env bash
# The CUDA target's checks, on a machine with an NVIDIA GPU (docs/cuda.md).
# One prepared run, meant to finish in under 8 minutes on a built tree:
#   1. builds flowc (scripts/build.sh; ccache makes a rebuild quick);
#   2. the GPU tests: runtime_gpu_test (the runtime's device path) and
#      tests/e2e/test_cuda.py (models compiled for this GPU match
#      onnxruntime; trial runs become tuning records that the next session
#      and the next compile use) and test_runtime_checks.py (a Gather index
#      out of range fails the run on the device too), test_index_ops.py,
#      test_transformer_families.py, test_decoders.py, test_video.py,
#      test_recurrent.py, test_selection.py and test_attention.py (integer
#      ops, casts, running sums, strided slices and scatters, nine
#      transformer families, six decoders, R(2+1)D-18's 3-D convolutions,
#      torch's LSTM, GRU and RNN exports, TopK (the runtime's flowc_topk_*
#      kernels), GatherND and the scatters (flowc_scatter_* at run-time
#      indices), and an opset-23 LLaMA-style decoder layer, compiled for this GPU and
#      compared with onnxruntime), which on a machine
#      without a GPU skip with their reason;
#   3. bench/gpu_bench.py: the example models, ResNet-50, BERT-base and
#      GPT-2-small compiled for this GPU's compute capability in fp32 and
#      with AMP (fp16), run on it, checked against onnxruntime on the CPU
#      (1e-3, AMP 1e-2), timed against torch eager on the GPU (fp32, and
#      under torch.autocast), with the trial-run search's gain over the
#      libraries' first choices and the first run's time with trials and
#      with their records, and how many convolutions run their epilogue
#      inside cuDNN's graph; each row's ten heaviest ops (flowc run
#      --profile); the cnn's and ResNet-50's batch-1 rows once more under
#      compute-sanitizer's memcheck (when the toolkit has it); with two GPUs
#      or more, ResNet-50's replicas on all of them (flowc run
#      --gpu-devices); one table.
# Exit 5 without a GPU, 1 when a test fails or an error exceeds its bound
# (every stage runs all the same).
#   bash scripts/gpu-check.sh [--models cnn,mlp,resnet50,bert,gpt2] [--batches 1,8]
#                             [--precisions fp32,fp16]
# A GPU machine without flowc's build dependencies (MLIR, gRPC, ...) runs it
# on binaries built elsewhere: GPU_CHECK_PREBUILT=1 skips step 1 (build/bin
# holds them, their libraries on LD_LIBRARY_PATH), and PYTHON names an
# interpreter with onnx, onnxruntime, pytest, torch and transformers (it
# also exports the models then).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L fails); nothing to check" >&2
  exit 5
fi
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
if [[ ${GPU_CHECK_PREBUILT:-0} != 1 ]]; then
  bash scripts/build.sh flowc flowcd flowc-worker runtime_gpu_test
fi
if [[ -n ${PYTHON:-} ]]; then
  export BENCH_EXPORT_PYTHON=$PYTHON
  TEST_PYTHON=$PYTHON
else
  TEST_PYTHON=.venv/bin/python
  PYTHON=.venv-bench/bin/python
  [[ -x $PYTHON ]] || PYTHON=.venv/bin/python
fi
# Every stage runs, so that one failing test still leaves the table; the
# exit status says whether any failed. The tests run small models: a stage
# past its bound has hung (124), and the models still get their turn.
failed=()
echo "== GPU unit tests"
timeout 120 build/bin/runtime_gpu_test || failed+=("runtime_gpu_test ($?)")
echo "== GPU end-to-end tests"
timeout 240 "$TEST_PYTHON" -m pytest -q -rs tests/e2e/test_cuda.py tests/e2e/test_runtime_checks.py \
  || failed+=("test_cuda.py, test_runtime_checks.py ($?)")
timeout 300 "$TEST_PYTHON" -m pytest -q -rs tests/e2e/test_index_ops.py \
  tests/e2e/test_transformer_families.py tests/e2e/test_decoders.py tests/e2e/test_video.py \
  tests/e2e/test_recurrent.py tests/e2e/test_selection.py tests/e2e/test_attention.py \
  -k cuda || failed+=("test_index_ops.py, test_transformer_families.py, test_decoders.py, \
test_video.py, test_recurrent.py, test_selection.py, test_attention.py ($?)")
echo "== models on the GPU"
"$PYTHON" bench/gpu_bench.py --profile-top 10 --memcheck cnn,resnet50 --replicas resnet50 "$@" ||
  failed+=("gpu_bench.py ($?)")
if ((${#failed[@]})); then
  echo "gpu-check: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "gpu-check: all passed"
