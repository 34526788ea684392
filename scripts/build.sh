#!/usr/bin/env bash
# Configures and builds the project in build/ (Release). Extra arguments go to cmake.
#   BUILD_TARGETS   targets to build (default: all)
#   BUILD_CUDA      on, off, auto (default: on when nvcc is found, on PATH or in
#                   /usr/local/cuda/bin) or gpu (on only when nvcc is found and a GPU is visible)
# The CUDA choice is passed every time, so one run's choice never lingers in CMake's cache.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
JOBS=${JOBS:-$(nproc)}
cuda=OFF
case ${BUILD_CUDA:-auto} in
  on) cuda=ON ;;
  off) ;;
  auto) command -v nvcc >/dev/null && cuda=ON ;;
  gpu) command -v nvcc >/dev/null && nvidia-smi -L >/dev/null 2>&1 && cuda=ON ;;
  *) echo "build.sh: BUILD_CUDA must be on, off, auto or gpu" >&2; exit 2 ;;
esac
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=$cuda "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j "$JOBS" "${targets[@]}"
