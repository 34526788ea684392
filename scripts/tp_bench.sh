#!/usr/bin/env bash
# Tensor-parallel scaling on a machine with several GPUs (docs/parallel.md, issue #13): the
# interconnect's all-reduce cost (tools/allreduce_bw.py), then `kestrel bench` of each preset
# model at each tensor-parallel size, and a table of throughput, scaling over TP=1 and the
# fraction of the floor (one GPU's floor from its measured copy rate and GEMM rate, divided
# by N: each rank streams 1/N of the weights and of the KV cache).
# Run after scripts/gpu_check.sh has built the kestrel binary in the same build folder.
#
#   scripts/tp_bench.sh [--build-dir build-gpu] [--presets "qwen3-8b"] [--tp "1 2"]
#                       [--only single,nano,decode256,prefill] [--deadline S] [--tag T]
#   --tag T     suffix of this run's results (bench_<preset>_<workload>_tp<N>_<T>.json), so that
#               a second call with other settings, e.g. KESTREL_CUSTOM_ALLREDUCE=0 (NCCL for
#               every all-reduce), adds rows to the same table
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$ROOT/build-gpu
PRESETS="qwen3-8b"
TPS="1 2"
ONLY=""
DEADLINE=0
TAG=""
while (($#)); do
  case $1 in
    --build-dir) BUILD=$(realpath -m "$2"); shift ;;
    --presets) PRESETS=$2; shift ;;
    --tp) TPS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --tag) TAG=_$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
LOGS=$BUILD/logs/tp
mkdir -p "$LOGS"
SUMMARY=$LOGS/tp_bench_summary.txt
[[ -z $TAG ]] && : >"$SUMMARY"
[[ -n ${OUT:-} ]] && trap 'cp "$SUMMARY" "$OUT/" 2>/dev/null; tar -czf "$OUT/tp_bench_logs.tar.gz" -C "$LOGS" . 2>/dev/null' EXIT
say() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_NVLS_ENABLE=0  # NVLink multicast can put a shared host's GPUs out of service
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
say "== tp_bench $(date -u +%Y-%m-%dT%H:%M:%SZ): $GPUS GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
nvidia-smi topo -m 2>/dev/null | head -n $((GPUS + 1)) | tee -a "$SUMMARY"
[[ -x $BUILD/kestrel ]] || { say "tp_bench: $BUILD/kestrel missing: run scripts/gpu_check.sh first"; exit 1; }
# The libraries gpu_check.sh unpacks from .devcarry where the machine lacks them.
[[ -d $BUILD/devdeps/lib ]] && export LD_LIBRARY_PATH=$BUILD/devdeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

if ((GPUS >= 2)) && [[ -z $TAG ]]; then
  timeout 120 python3 tools/allreduce_bw.py --gpus "$GPUS" --hidden 4096 --json "$LOGS/allreduce.json" 2>&1 |
    grep -v Warning | tee -a "$SUMMARY"
fi

BENCHES=(
  "single:--num-seqs 1 --fixed-input-len 512 --fixed-output-len 256"
  "nano:--num-seqs 256"
  "decode256:--num-seqs 256 --fixed-input-len 512 --fixed-output-len 128"
  "prefill:--num-seqs 32 --fixed-input-len 1024 --fixed-output-len 1"
)
wanted() { [[ -z $ONLY || ",$ONLY," == *",$1,"* ]]; }
status=0
for preset in $PRESETS; do
  model=/tmp/kestrel_models/$preset
  if [[ ! -e $model/config.json ]]; then
    t0=$SECONDS
    mkdir -p /tmp/kestrel_models
    timeout 300 "$BUILD/kestrel" make-model --preset "$preset" --out "$model" >"$LOGS/make_$preset.log" 2>&1 ||
      { say "make-model $preset FAILED"; tail -n 5 "$LOGS/make_$preset.log"; status=1; continue; }
    say "make-model $preset: $((SECONDS - t0)) s"
  fi
  for entry in "${BENCHES[@]}"; do
    name=${entry%%:*} flags=${entry#*:}
    wanted "$name" || continue
    for tp in $TPS; do
      ((tp <= GPUS)) || continue
      if ((DEADLINE && SECONDS >= DEADLINE)); then say "skipped (deadline): $preset $name tp$tp$TAG"; continue; fi
      t0=$SECONDS
      # shellcheck disable=SC2086
      if timeout 240 "$BUILD/kestrel" bench --model "$model" $flags --tp "$tp" \
           --json "$LOGS/bench_${preset}_${name}_tp$tp$TAG.json" >"$LOGS/bench_${preset}_${name}_tp$tp$TAG.log" 2>&1; then
        say "bench $preset $name tp$tp$TAG: ok in $((SECONDS - t0)) s"
      else
        status=1; say "bench $preset $name tp$tp$TAG: FAILED in $((SECONDS - t0)) s:"
        tail -n 8 "$LOGS/bench_${preset}_${name}_tp$tp$TAG.log" | tee -a "$SUMMARY"
      fi
    done
  done
done

python3 - "$LOGS" <<'EOF' | tee -a "$SUMMARY"
import glob, json, os, re, sys
runs = {}
for path in glob.glob(os.path.join(sys.argv[1], "bench_*_tp*.json")):
    m = re.match(r"bench_(.+)_([a-z0-9]+)_tp(\d+)(_\w+)?\.json", os.path.basename(path))
    runs[(m.group(1), m.group(2), int(m.group(3)), m.group(4) or "")] = json.load(open(path))
print(f"{'model':10s} {'workload':10s} {'tp':>8s} {'output tok/s':>13s} {'decode tok/s':>13s} {'prefill tok/s':>14s} "
      f"{'step ms':>8s} {'x TP1':>6s} {'of floor':>9s}")
for key in sorted(runs):
    preset, name, tp, tag = key
    j = runs[key]
    base = runs.get((preset, name, 1, ""))
    metric = "prefill_tok_s" if name == "prefill" else "decode_tok_s" if name == "single" else "output_tok_s"
    scale = f"{j[metric] / base[metric]:.2f}" if base else "-"
    # One GPU's floor (TP=1's run: its copy rate, GEMM rate, whole weights and KV) over N
    # ranks, each streaming 1/N of the bytes: the all-reduces are what the gap holds.
    f = base or {}
    if not base:
        floor = 0
    elif name == "prefill":
        floor = f["prompt_tokens"] / f["floor_prefill_s"] * tp if f["floor_prefill_s"] else 0
    elif name == "single":
        floor = f["floor_decode_tok_s"] * tp
    else:
        floor = f["output_tokens"] / f["floor_total_s"] * tp if f["floor_total_s"] else 0
    frac = f"{100 * j[metric] / floor:.1f}%" if floor else "-"
    print(f"{preset:10s} {name:10s} {str(tp) + tag:>8s} {j['output_tok_s']:13.1f} {j['decode_tok_s']:13.1f} {j['prefill_tok_s']:14.1f} "
          f"{j['decode_step_ms']:8.3f} {scale:>6s} {frac:>9s}")
EOF
say "== tp_bench: $([[ $status == 0 ]] && echo OK || echo FAILED)"
exit $status
