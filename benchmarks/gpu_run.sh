#!/usr/bin/env bash
# Everything the project checks on a CUDA machine, in one go (a lent H100 here):
# GPU traces of the samples, NVML sampling, the GPU-only tests, step-time truth,
# autofix gains. Writes into ${OUT:-gpu-out}/; run from the repository root.
#   bash benchmarks/gpu_run.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/traces" "$OUT/json"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
py=${PYTHON:-python3}
{
  nvidia-smi -L
  $py -c "import torch, pynvml; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/machine.txt"
echo "== GPU traces of the samples" | tee "$OUT/log.txt"
$py samples/record_traces.py --dest "$OUT/traces" --samples all 2>&1 | grep -v USDT | tee -a "$OUT/log.txt"
for f in "$OUT"/traces/*.pt.trace.json.gz; do
  n=$(basename "$f" .pt.trace.json.gz)
  $py -m diagnose analyze "$f" --format json -o "$OUT/json/$n.json"
  $py -m diagnose analyze "$f" > "$OUT/json/$n.txt" 2>&1
done
echo "== GPU tests" | tee -a "$OUT/log.txt"
$py -m pytest -q -p no:cacheprovider -x tests/capture/test_capture.py tests/capture/test_samplers.py \
  tests/capture/test_step_clock.py tests/project/test_samples.py 2>&1 | grep -v USDT | tail -15 | tee -a "$OUT/log.txt"
echo "== step time truth" | tee -a "$OUT/log.txt"
$py benchmarks/step_time_truth.py --rounds 3 2>&1 | grep -v USDT | tee "$OUT/step_time_truth.txt"
echo "== capture overhead" | tee -a "$OUT/log.txt"
$py benchmarks/capture_overhead.py --rounds 12 2>&1 | grep -v USDT | tee "$OUT/capture_overhead.txt"
echo "== autofix" | tee -a "$OUT/log.txt"
$py benchmarks/autofix_gpu.py --budget 60 2>&1 | grep -v USDT | tee "$OUT/autofix_gpu.txt"
