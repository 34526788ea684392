#!/usr/bin/env bash
# A/B comparison of two engine settings (environment variables) over batch sizes, in one call:
# for each number of sequences, `kestrel bench` with setting A then setting B (alternating, so
# drift hits both), and a table of the decode step time and decode tok/s of each with B's
# change against A.
#
#   scripts/ab_bench.sh --model DIR [--kestrel BIN] [--seqs "16 32 64"] [--input-len 1024]
#       [--output-len 128] [--a "VAR=x ..."] [--b "VAR=y ..."] [--out DIR] [-- bench flags...]
#
# Example (the fused RoPE/store decode kernel at every size against the store kernel first):
#   scripts/ab_bench.sh --model /tmp/kestrel_models/qwen3-0.6b --a KESTREL_DECODE_MMA_ROPE=0 \
#       --b KESTREL_DECODE_MMA_ROPE=100000
# The binary defaults to build-gpu/kestrel (gpu_check.sh's build), else build/kestrel; the
# libraries gpu_check.sh carries (build-gpu/devdeps/lib) go on LD_LIBRARY_PATH when present.
# Each run's JSON and log go to --out (default: a fresh temporary directory).
set -uo pipefail
cd "$(dirname "$0")/.."

MODEL="" BIN="" SEQS="16 32 64" IN=1024 OUTLEN=128 A="" B="" OUTDIR="" EXTRA=()
while (($#)); do
  case $1 in
    --model) MODEL=$2; shift ;;
    --kestrel) BIN=$2; shift ;;
    --seqs) SEQS=$2; shift ;;
    --input-len) IN=$2; shift ;;
    --output-len) OUTLEN=$2; shift ;;
    --a) A=$2; shift ;;
    --b) B=$2; shift ;;
    --out) OUTDIR=$2; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "ab_bench.sh: unknown argument $1 (see the header)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n $MODEL ]] || { echo "ab_bench.sh: --model is required" >&2; exit 2; }
if [[ -z $BIN ]]; then
  BIN=build-gpu/kestrel
  [[ -x $BIN ]] || BIN=build/kestrel
fi
[[ -x $BIN ]] || { echo "ab_bench.sh: no kestrel binary at $BIN (build first, or --kestrel)" >&2; exit 2; }
[[ -d build-gpu/devdeps/lib ]] && export LD_LIBRARY_PATH=$PWD/build-gpu/devdeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -n $OUTDIR ]] || OUTDIR=$(mktemp -d)
mkdir -p "$OUTDIR"

status=0
for n in $SEQS; do
  for side in a b; do
    vars=$A
    [[ $side == b ]] && vars=$B
    # shellcheck disable=SC2086
    if ! env $vars timeout 300 "$BIN" bench --model "$MODEL" --num-seqs "$n" --fixed-input-len "$IN" \
         --fixed-output-len "$OUTLEN" --no-ceilings --json "$OUTDIR/${n}_$side.json" "${EXTRA[@]}" \
         >"$OUTDIR/${n}_$side.log" 2>&1; then
      echo "ab_bench.sh: $n sequences, setting $side (${vars:-none}) failed; last lines of $OUTDIR/${n}_$side.log:" >&2
      tail -n 5 "$OUTDIR/${n}_$side.log" >&2
      status=1
    fi
  done
done

python3 - "$OUTDIR" "$SEQS" "${A:-(none)}" "${B:-(none)}" <<'EOF'
import json, os, sys
out, seqs, a, b = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
print(f"A: {a}\nB: {b}")
print(f"{'seqs':>5} {'A step ms':>10} {'B step ms':>10} {'B vs A':>8} {'A decode tok/s':>15} {'B decode tok/s':>15}")
for n in seqs:
    try:
        ja = json.load(open(os.path.join(out, f"{n}_a.json")))
        jb = json.load(open(os.path.join(out, f"{n}_b.json")))
    except (OSError, ValueError):
        print(f"{n:>5} (a run failed)")
        continue
    sa, sb = ja["decode_step_ms"], jb["decode_step_ms"]
    change = f"{100 * (sb - sa) / sa:+.1f}%" if sa else "-"
    print(f"{n:>5} {sa:10.3f} {sb:10.3f} {change:>8} {ja['decode_tok_s']:15.0f} {jb['decode_tok_s']:15.0f}")
EOF
exit $status
