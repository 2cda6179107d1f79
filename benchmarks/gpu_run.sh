#!/usr/bin/env bash
# Everything the project checks on a CUDA machine, in one go (a lent H100/H200 here, whose
# time is short: each part is capped, the most wanted first, so that a run ends in ~9 min):
#   1. GPU traces of the samples, each analysed (text and JSON: findings, the step model's
#      replay error, each fix's prediction);
#   2. autofix on the GPU workloads and samples: predicted beside measured (the pageable
#      job is the one where non_blocking matters: trials synchronise once per block);
#   3. the tests that need a GPU to mean anything (samples end to end, NVML samplers,
#      the step clock);
#   4. step-time truth (the step time printed is the one without the profiler).
# Writes into ${OUT:-gpu-out}/; run from the repository root.
#   bash benchmarks/gpu_run.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/traces" "$OUT/json"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
py=${PYTHON:-python3}
cap() { local s=$1; shift; timeout -k 5 "$s" "$@"; local rc=$?; [ $rc = 124 ] && echo "(stopped after ${s} s)"; return $rc; }
{
  date -u
  nvidia-smi -L
  $py -c "import torch, pynvml; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  nproc
} 2>&1 | tee "$OUT/machine.txt"
echo "== GPU traces of the samples" | tee "$OUT/log.txt"
cap "${CAP_TRACES:-100}" $py samples/record_traces.py --dest "$OUT/traces" --samples all 2>&1 | grep -v USDT | tee -a "$OUT/log.txt"
for f in "$OUT"/traces/*.pt.trace.json.gz; do
  n=$(basename "$f" .pt.trace.json.gz)
  cap 20 $py -m diagnose analyze "$f" --format json -o "$OUT/json/$n.json"
  cap 20 $py -m diagnose analyze "$f" > "$OUT/json/$n.txt" 2>&1
done
echo "== autofix" | tee -a "$OUT/log.txt"
cap "${CAP_AUTOFIX:-280}" $py benchmarks/autofix_gpu.py --budget "${BUDGET:-30}" 2>&1 | grep -v USDT | tee "$OUT/autofix_gpu.txt"
echo "== GPU tests" | tee -a "$OUT/log.txt"
cap "${CAP_TESTS:-120}" $py -m pytest -q -p no:cacheprovider tests/project/test_samples.py \
  tests/capture/test_samplers.py tests/capture/test_step_clock.py 2>&1 | grep -v USDT | tail -40 | tee -a "$OUT/log.txt"
echo "== step time truth" | tee -a "$OUT/log.txt"
cap "${CAP_TRUTH:-60}" $py benchmarks/step_time_truth.py --rounds 3 2>&1 | grep -v USDT | tee "$OUT/step_time_truth.txt"
