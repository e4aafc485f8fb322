#!/usr/bin/env bash
# Issues 4 and 6 on a lent GPU machine (the device tool): GPU tests, the GoogLeNet timeline, CUDA benches.
# Usage there:  bash experiments/gpu_streams.sh STEPS...   with steps such as
#   tests | timeline | bench:MODEL:BATCH[:CANDIDATES]
# e.g. the stacks' Triton kernels on BrainSlug's network: bench:poolstack:8:cuda:eager,cuda:compile-ro,pathweave:stacks
# Each step gets what is left of DEADLINE_S (default 560 s) minus a margin; everything lands in
# $OUT/gpu (log, bench JSON, picture) and is packed into $OUT/gpu.tar.gz at the end.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
dir=$OUT/gpu
mkdir -p "$dir"
log=$dir/log.txt
start=$(date +%s)
deadline=${DEADLINE_S:-560}
left() { echo $((deadline - ($(date +%s) - start) - 15)); }
step() {  # step NAME COMMAND...: run with what is left of the deadline, log everything
  local name=$1
  shift
  local t
  t=$(left)
  if ((t < 20)); then
    echo "== $name: skipped, ${t}s left" | tee -a "$log"
    return
  fi
  echo "== $name ($(date +%T), ${t}s left)" | tee -a "$log"
  timeout "$t" "$@" 2>&1 | tee -a "$log"
  echo "== $name: exit ${PIPESTATUS[0]} after $(($(date +%s) - start))s" | tee -a "$log"
}

{
  nvidia-smi -L
  python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
  nproc
} 2>&1 | tee -a "$log"
CUDA_PEERS=cuda:eager,cuda:graph,cuda:compile-ro
OURS=pathweave:streams,pathweave:streams-critical,pathweave:nimble,pathweave:wavefront,pathweave:single
for s in "$@"; do
  case $s in
    tests)
      step tests python3 -m pytest -q -m gpu -p no:cacheprovider tests/execute/test_streams.py \
        tests/analyze/test_kernels.py tests/transform/test_stack_triton.py
      ;;
    timeline)
      step timeline python3 -m pathweave timeline googlenet -o "$dir/timeline_googlenet.png" \
        --json "$dir/timeline_googlenet.json"
      ;;
    bench:*)
      IFS=: read -r _ model batch cands <<<"$s"
      cands=${cands:-$CUDA_PEERS,$OURS,pathweave:auto}
      step "$s" python3 -m pathweave bench "$model" --device cuda --batch "$batch" --rounds 30 --quiet \
        --candidates "$cands" --json "$dir/${model}-b${batch}.json"
      ;;
    *) echo "unknown step $s" | tee -a "$log" ;;
  esac
done
tar -czf "$OUT/gpu.tar.gz" -C "$OUT" gpu
