#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, builds the CUDA backend's tests and
# micro-benchmark with all cores, runs them, and prints a summary. Assumes only the CUDA
# toolkit (nvcc), cmake, a C++ compiler and python3; Debian dev packages the build wants
# but the machine lacks come from .devcarry/ (see --prepare-carry).
#
#   scripts/gpu_check.sh [--bench] [--no-tests] [--arch 90] [--build-dir build-gpu]
#   scripts/gpu_check.sh --prepare-carry   # on a dev machine that has the Debian packages:
#       copies fmt, spdlog and nlohmann-json headers and GoogleTest's sources into .devcarry/
#       (git-ignored); carry that folder to the GPU machine.
#   --force-carry   use .devcarry even where system packages exist (to test that path)
#   --sanitize      also run compute-sanitizer (memcheck, and racecheck on attention) over
#                   the kernel tests, each bounded to a few minutes
#
# Logs and the summary go to $OUT when it is set (the device tool), else to the build dir.
# Exit status: 0 when the build and every test passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$ROOT/.devcarry

BUILD=$ROOT/build-gpu
ARCH=90
RUN_TESTS=1
RUN_BENCH=0
RUN_SANITIZE=0
FORCE_CARRY=0
while (($#)); do
  case $1 in
    --prepare-carry)
      mkdir -p "$CARRY/include"
      for d in fmt spdlog nlohmann; do
        [[ -d /usr/include/$d ]] || { echo "missing /usr/include/$d (apt-get install the -dev package)"; exit 1; }
        rm -rf "${CARRY:?}/include/$d" && cp -r "/usr/include/$d" "$CARRY/include/"
      done
      [[ -d /usr/src/googletest ]] || { echo "missing /usr/src/googletest (apt-get install googletest)"; exit 1; }
      rm -rf "$CARRY/googletest" && cp -r /usr/src/googletest "$CARRY/googletest"
      du -sh "$CARRY"
      exit 0 ;;
    --bench) RUN_BENCH=1 ;;
    --no-tests) RUN_TESTS=0 ;;
    --sanitize) RUN_SANITIZE=1 ;;
    --force-carry) FORCE_CARRY=1 ;;
    --arch) ARCH=$2; shift ;;
    --build-dir) BUILD=$(realpath -m "$2"); shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done

LOGS=${OUT:-$BUILD}
mkdir -p "$BUILD" "$LOGS"
SUMMARY=$LOGS/gpu_check_summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
JOBS=$(nproc)

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { say "gpu_check: nvcc not found"; exit 1; }
GEN="Unix Makefiles"
command -v ninja >/dev/null && GEN=Ninja

say "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
say "nvcc: $(nvcc --version | tail -n 2 | head -n 1)"
say "cmake: $(cmake --version | head -n 1); generator $GEN; $JOBS jobs"

# --- dependencies -------------------------------------------------------------------
CFG_DIRS=(/usr/lib/x86_64-linux-gnu/cmake /usr/lib/cmake /usr/lib64/cmake /usr/share/cmake
          /usr/local/lib/cmake /usr/local/share/cmake /usr/local/lib/x86_64-linux-gnu/cmake)
has_cfg() {
  local d
  for d in "${CFG_DIRS[@]}"; do [[ -e $d/$1 ]] && return 0; done
  return 1
}
need_carry() {
  [[ -d $CARRY/$1 ]] || { say "gpu_check: $2 missing here and $CARRY/$1 absent: run scripts/gpu_check.sh --prepare-carry where the Debian packages exist, and carry .devcarry"; exit 1; }
}

CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON -DKESTREL_TESTS=ON
            "-DCMAKE_CUDA_ARCHITECTURES=$ARCH")
DEPS=$BUILD/devdeps
if ((FORCE_CARRY)) || ! has_cfg fmt/fmt-config.cmake || ! has_cfg spdlog/spdlogConfig.cmake ||
   ! has_cfg nlohmann_json/nlohmann_jsonConfig.cmake; then
  need_carry include "fmt/spdlog/nlohmann-json"
  # Header-only stand-ins for the packages' CMake configs.
  mkdir -p "$DEPS/fmt" "$DEPS/spdlog" "$DEPS/nlohmann_json"
  cat >"$DEPS/fmt/fmt-config.cmake" <<EOF
if(NOT TARGET fmt::fmt)
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$CARRY/include"
                        INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
endif()
EOF
  cat >"$DEPS/spdlog/spdlogConfig.cmake" <<EOF
if(NOT TARGET spdlog::spdlog)
  add_library(spdlog::spdlog INTERFACE IMPORTED)
  set_target_properties(spdlog::spdlog PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$CARRY/include"
                        INTERFACE_COMPILE_DEFINITIONS SPDLOG_FMT_EXTERNAL
                        INTERFACE_LINK_LIBRARIES fmt::fmt)
endif()
EOF
  cat >"$DEPS/nlohmann_json/nlohmann_jsonConfig.cmake" <<EOF
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
                        INTERFACE_INCLUDE_DIRECTORIES "$CARRY/include")
endif()
EOF
  CMAKE_ARGS+=("-Dfmt_DIR=$DEPS/fmt" "-Dspdlog_DIR=$DEPS/spdlog" "-Dnlohmann_json_DIR=$DEPS/nlohmann_json")
  say "deps: fmt, spdlog, nlohmann-json from .devcarry (header-only)"
else
  say "deps: fmt, spdlog, nlohmann-json from the system"
fi

if ((FORCE_CARRY)) || ! has_cfg GTest/GTestConfig.cmake; then
  need_carry googletest "GoogleTest"
  if [[ ! -e $DEPS/gtest/lib/cmake/GTest/GTestConfig.cmake && ! -e $DEPS/gtest/lib64/cmake/GTest/GTestConfig.cmake ]]; then
    say "deps: building GoogleTest from .devcarry/googletest"
    if ! { cmake -S "$CARRY/googletest" -B "$DEPS/gtest-build" -G "$GEN" -DCMAKE_BUILD_TYPE=Release \
             -DCMAKE_INSTALL_PREFIX="$DEPS/gtest" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 &&
           cmake --build "$DEPS/gtest-build" -j "$JOBS" --target install; } >"$LOGS/gtest_build.log" 2>&1; then
      say "gpu_check: GoogleTest build failed (see gtest_build.log)"; tail -n 30 "$LOGS/gtest_build.log"; exit 1
    fi
  fi
  CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$DEPS/gtest")
  say "deps: GoogleTest from .devcarry (built here)"
fi

if ((FORCE_CARRY)) || ! command -v pkg-config >/dev/null ||
   ! pkg-config --exists libxxhash libpcre2-8 libutf8proc 2>/dev/null ||
   ! ls /usr/lib/x86_64-linux-gnu/libopenblas* /usr/lib/libopenblas* >/dev/null 2>&1; then
  CMAKE_ARGS+=(-DKESTREL_MINIMAL_DEPS=ON)
  say "deps: tokenizer/engine/CPU-backend libraries missing: KESTREL_MINIMAL_DEPS=ON (CUDA targets only)"
fi

# --- build --------------------------------------------------------------------------
TARGETS=(backend_cuda_tests)
((RUN_BENCH)) && TARGETS+=(cuda_ops_bench)
t0=$SECONDS
if ! { cmake -S "$ROOT" -B "$BUILD" -G "$GEN" "${CMAKE_ARGS[@]}" &&
       cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"; } >"$LOGS/build.log" 2>&1; then
  say "build: FAILED after $((SECONDS - t0)) s (build.log):"
  grep -E -m 40 "error|Error|FAILED" "$LOGS/build.log" | tee -a "$SUMMARY"
  exit 1
fi
say "build: ok in $((SECONDS - t0)) s (${TARGETS[*]}, sm_$ARCH)"

# --- run ----------------------------------------------------------------------------
status=0
if ((RUN_TESTS)); then
  t0=$SECONDS
  timeout 240 "$BUILD/tests/backend_cuda_tests" >"$LOGS/tests.log" 2>&1
  rc=$?
  passed=$(grep -E -o '^\[  PASSED  \] [0-9]+' "$LOGS/tests.log" | grep -E -o '[0-9]+$' || echo 0)
  skipped=$(grep -E -o '^\[  SKIPPED \] [0-9]+ tests?,' "$LOGS/tests.log" | grep -E -o '[0-9]+' || echo 0)
  say "tests: exit $rc in $((SECONDS - t0)) s; passed ${passed:-0}, skipped ${skipped:-0}"
  if ((rc != 0)); then
    status=1
    grep -E '^\[  FAILED  \]|Failure|error' "$LOGS/tests.log" | head -n 60 | tee -a "$SUMMARY"
  fi
  if grep -q 'no CUDA device' "$LOGS/tests.log"; then
    say "tests: WARNING: the tests saw no CUDA device and skipped"; status=1
  fi
fi
if ((RUN_BENCH)); then
  say "bench: $BUILD/bench/cuda_ops_bench"
  if ! timeout 180 "$BUILD/bench/cuda_ops_bench" 2>&1 | tee "$LOGS/bench.log" | tee -a "$SUMMARY"; then status=1; fi
fi
if ((RUN_SANITIZE)); then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # The GEMM tests exercise cuBLAS, not our kernels; the long rows only slow it down.
  for tool in memcheck racecheck; do
    # CudaCheck.* fails CUDA calls on purpose, which the sanitizer would report.
    filter='-CudaCheck.*:CudaLinear.*:CudaGemmRunner.*:CudaAttention.LongRows'
    [[ $tool == racecheck ]] && filter='CudaAttention.DecodeBatch:CudaAttention.MixedPrefillAndDecode'
    t0=$SECONDS
    timeout 120 "$SAN" --tool "$tool" --error-exitcode 3 "$BUILD/tests/backend_cuda_tests" \
      "--gtest_filter=$filter" >"$LOGS/sanitize_$tool.log" 2>&1
    rc=$?
    say "sanitize $tool: exit $rc in $((SECONDS - t0)) s; $(grep -E -m 1 "(ERROR|RACECHECK) SUMMARY" "$LOGS/sanitize_$tool.log" || echo 'no summary')"
    ((rc != 0)) && { status=1; grep -E -m 20 'Invalid|Race|hazard|Error' "$LOGS/sanitize_$tool.log" | tee -a "$SUMMARY"; }
  done
fi
say "== gpu_check: $([[ $status == 0 ]] && echo OK || echo FAILED)"
exit $status
