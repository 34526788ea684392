#!/usr/bin/env bash
# nano-vLLM's bench.py through the Python package (bench/bench.py) against `kestrel bench`:
# the same workload (random token ids, lengths uniform in 100..max, ignore_eos, temperature
# 0.6, Python's random after seed(S), rebuilt token for token by the CLI), the same model and
# engine settings, run back to back and alternating, then one table of output tok/s. The
# Python layer adds one call into C++ per engine step; the table shows what that costs.
#
#   scripts/python_bench_compare.sh --model DIR [--build-dir build] [--runs 2]
#       [--num-seqs 256] [--max-input-len 1024] [--max-output-len 1024] [--seed 0]
#       [--max-model-len 4096] [--device auto] [--kv-cache-memory BYTES] [--out DIR]
#
# On a 2-core CPU with a tiny model: --device cpu --num-seqs 8 --max-input-len 100
# --max-output-len 100 --kv-cache-memory 67108864. The module is the build's (<build>/python)
# and runs under the interpreter it was built for (CMakeCache's Python3_EXECUTABLE).
# Exit status 0 when every run succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/cpu_env.sh

BUILD=build RUNS=2 MODEL="" OUTDIR=""
NUM_SEQS=256 MAX_IN=1024 MAX_OUT=1024 SEED=0 MAX_LEN=4096 DEVICE=auto KV=""
while (($#)); do
  case $1 in
    --model) MODEL=$2 ;;
    --build-dir) BUILD=$2 ;;
    --runs) RUNS=$2 ;;
    --num-seqs) NUM_SEQS=$2 ;;
    --max-input-len) MAX_IN=$2 ;;
    --max-output-len) MAX_OUT=$2 ;;
    --seed) SEED=$2 ;;
    --max-model-len) MAX_LEN=$2 ;;
    --device) DEVICE=$2 ;;
    --kv-cache-memory) KV=$2 ;;
    --out) OUTDIR=$2 ;;
    *) echo "python_bench_compare: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -n $MODEL ]] || { echo "python_bench_compare: --model DIR is required" >&2; exit 2; }
[[ -x $BUILD/kestrel ]] || { echo "python_bench_compare: no $BUILD/kestrel (build it)" >&2; exit 1; }
# Given (-DPython3_EXECUTABLE, gpu_check) or found (FindPython's internal entry).
PY=$(sed -n 's/^_\{0,1\}Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null | head -n 1)
PY=${PY:-python3}
if ! PYTHONPATH=$BUILD/python "$PY" -c 'import kestrel' 2>/dev/null; then
  echo "python_bench_compare: $PY cannot import kestrel from $BUILD/python (build the kestrel_python target)" >&2
  exit 1
fi
OUTDIR=${OUTDIR:-$(mktemp -d)}
mkdir -p "$OUTDIR"

common=(--model "$MODEL" --num-seqs "$NUM_SEQS" --max-input-len "$MAX_IN" --max-output-len "$MAX_OUT"
        --seed "$SEED" --max-model-len "$MAX_LEN" --device "$DEVICE")
kv_cli=() kv_py=()
[[ -n $KV ]] && kv_cli=(--kv-cache-memory "$KV") kv_py=(--kv-cache-memory "$KV")
status=0
for ((i = 1; i <= RUNS; i++)); do
  # Alternating, so that a drift of the machine (clocks, another tenant) hits both alike.
  if ! "$BUILD/kestrel" bench "${common[@]}" "${kv_cli[@]}" --no-ceilings \
       --json "$OUTDIR/cli_$i.json" >"$OUTDIR/cli_$i.log" 2>&1; then
    status=1; echo "kestrel bench run $i FAILED:"; tail -n 5 "$OUTDIR/cli_$i.log"
  fi
  if ! PYTHONPATH=$BUILD/python "$PY" bench/bench.py "${common[@]}" "${kv_py[@]}" \
       --json "$OUTDIR/py_$i.json" >"$OUTDIR/py_$i.log" 2>&1; then
    status=1; echo "bench.py run $i FAILED:"; tail -n 5 "$OUTDIR/py_$i.log"
  fi
done

"$PY" - "$OUTDIR" "$RUNS" <<'EOF' || status=1
import json, os, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def rate(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
rows = [(i, rate(f"cli_{i}.json"), rate(f"py_{i}.json")) for i in range(1, runs + 1)]
first = next((r for _, c, p in rows for r in (c, p) if r), None)
if first:
    print(f"python_bench_compare: {first['device']}, {first.get('num_seqs')} seqs, "
          f"{first['prompt_tokens']} prompt and {first['output_tokens']} output tokens per run")
# The two draw their workloads apart (C++ and Python): the token counts show they agree.
counts = {(r["prompt_tokens"], r["output_tokens"]) for _, c, p in rows for r in (c, p) if r}
if len(counts) > 1:
    print(f"python_bench_compare: WORKLOADS DIFFER (prompt, output tokens): {sorted(counts)}")
    sys.exit(1)
print(f"{'run':>6s} {'kestrel bench tok/s':>20s} {'bench.py tok/s':>15s} {'bench.py/cli':>13s}")
def line(name, c, p):
    ratio = f"{100 * p / c:.1f}%" if c and p else "-"
    print(f"{name:>6s} {c or 0:20.1f} {p or 0:15.1f} {ratio:>13s}")
for i, c, p in rows:
    line(str(i), c and c["output_tok_s"], p and p["output_tok_s"])
cs = [c["output_tok_s"] for _, c, _ in rows if c]
ps = [p["output_tok_s"] for _, _, p in rows if p]
if cs and ps:
    line("median", statistics.median(cs), statistics.median(ps))
EOF
exit $status
