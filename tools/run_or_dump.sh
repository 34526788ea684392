#!/usr/bin/env bash
# Runs a command with a time limit; if it is still running at the limit, prints every thread's
# stack of it and of its child processes (cuda-gdb, which the GPU machines have, else gdb),
# then kills it. For hangs seen only on a lent GPU machine, where nothing can be attached later.
#
#   tools/run_or_dump.sh SECONDS command [args...]
# Exit status: the command's, or 124 after a dump.
set -uo pipefail
limit=$1
shift
"$@" &
pid=$!
for ((i = 0; i < limit * 10; ++i)); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 0.1
done
GDB=$(command -v cuda-gdb || command -v /usr/local/cuda/bin/cuda-gdb || command -v gdb)
for p in $pid $(pgrep -P "$pid"); do
  echo "=== run_or_dump: $limit s passed; stacks of pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-200)"
  [[ -n $GDB ]] && timeout 60 "$GDB" -p "$p" -batch -ex "thread apply all bt 25" 2>&1 |
    grep -E "^Thread|^#" | head -n 400
done
kill -9 "$pid" $(pgrep -P "$pid") 2>/dev/null
wait "$pid" 2>/dev/null
exit 124
