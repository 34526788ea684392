# Sourced by the run and test scripts: environment for fast, polite CPU runs.
#
# Debian's OpenBLAS (0.3.21) does not recognise some recent or virtualised x86 CPUs and falls
# back to its SSE3 kernels (~5x slower matrix products). It reads OPENBLAS_CORETYPE only when
# the library loads, so it has to be set before the program starts.
if [[ -z "${OPENBLAS_CORETYPE:-}" && -r /proc/cpuinfo ]]; then
  if grep -qm1 -w avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qm1 -w avx2 /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
  fi
fi
# Idle OpenMP workers sleep instead of spinning: on a shared or small machine spinning
# threads steal the cores that the next parallel region needs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
