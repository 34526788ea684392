#!/usr/bin/env bash
# Kernel times of rank 0 under tensor parallelism (docs/parallel.md, "Where a TP=4 step
# goes"): ncu over `kestrel bench --profile-steps decode` on the Qwen3-8B-shaped model, with
# the all-reduces skipped (KESTREL_BENCH_SKIP_ALL_REDUCE=1) so that no kernel waits on
# another rank while ncu serialises rank 0's, then tools/ncu_summary.py per step.
# Run after scripts/gpu_check.sh has built the kestrel binary.
#
#   scripts/tp_profile.sh [--build-dir build-gpu] [--tp 4] [--workload nano|single] [--keep-all-reduce]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=$PWD/build-gpu TP=4 WORKLOAD=nano SKIP=1
while (($#)); do
  case $1 in
    --build-dir) BUILD=$(realpath -m "$2"); shift ;;
    --tp) TP=$2; shift ;;
    --workload) WORKLOAD=$2; shift ;;
    --keep-all-reduce) SKIP=0 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
case $WORKLOAD in
  nano) FLAGS="--num-seqs 256" ;;
  single) FLAGS="--num-seqs 1 --fixed-input-len 512 --fixed-output-len 16" ;;
  *) echo "unknown workload $WORKLOAD"; exit 2 ;;
esac
export NCCL_NVLS_ENABLE=0  # NVLink multicast can put a shared host's GPUs out of service
[[ -d $BUILD/devdeps/lib ]] && export LD_LIBRARY_PATH=$BUILD/devdeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
((SKIP)) && export KESTREL_BENCH_SKIP_ALL_REDUCE=1
MODEL=/tmp/kestrel_models/qwen3-8b
[[ -e $MODEL/config.json ]] || "$BUILD/kestrel" make-model --preset qwen3-8b --out "$MODEL" >/dev/null || exit 1
LOGS=$BUILD/logs/tp
mkdir -p "$LOGS"
CSV=$LOGS/ncu_${WORKLOAD}_tp$TP.csv
# shellcheck disable=SC2086
timeout 300 ncu --clock-control none --cache-control none --profile-from-start off \
  --metrics gpu__time_duration.sum --csv "$BUILD/kestrel" bench --model "$MODEL" --tp "$TP" $FLAGS \
  --no-ceilings --profile-steps decode >"$CSV" 2>"$LOGS/ncu_${WORKLOAD}_tp$TP.err" || exit 1
echo "rank 0 at TP=$TP, $WORKLOAD, all-reduces $( ((SKIP)) && echo skipped || echo kept ), us per decode step:"
python3 tools/ncu_summary.py "$CSV" --per 2 | tee "$LOGS/ncu_${WORKLOAD}_tp$TP.txt"
