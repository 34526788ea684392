#!/usr/bin/env bash
# The test command: installs dependencies, builds everything (the CUDA code too when nvcc
# is present), and runs every test that this machine can run. GPU tests skip themselves
# where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cpu_env.sh
scripts/install_deps.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j "$(nproc)"
