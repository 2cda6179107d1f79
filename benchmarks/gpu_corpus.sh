#!/usr/bin/env bash
# The corpus on a lent CUDA machine (issue 48's GPU rows), in one go that ends in ~8 min:
# every offered fix of each warning/critical finding, predicted and then timed without
# the profiler (corpus_predict.py --every-fix: AMP, pinning + non_blocking, the
# optimizer's foreach/fused, channels_last, cudnn.benchmark, compile, workers, batch
# size), the validate half first, then the tune half; each job stopped after
# $JOB_SECONDS, each half after its cap. The diagnoses (JSON, traces) come back in keep.tgz.
#   TORCH_DIAGNOSE_CORPUS=/path/to/other/corpus OUT=gpu-out bash benchmarks/gpu_corpus.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
py=${PYTHON:-python3}
keep=$(mktemp -d)
{
  date -u
  nvidia-smi -L
  $py -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())"
  nproc
} 2>&1 | tee "$OUT/machine.txt"
for half in validate tune; do
  if [ $half = validate ]; then cap=${CAP_VALIDATE:-300}; else cap=${CAP_TUNE:-150}; fi
  timeout -k 5 "$cap" $py benchmarks/corpus_predict.py --half $half --every-fix \
    --rounds "${ROUNDS:-5}" --job-seconds "${JOB_SECONDS:-25}" --keep "$keep/$half" 2>&1 \
    | grep -v -e USDT -e UserWarning -e check_worker_number | tee "$OUT/corpus_predict_gpu_$half.txt"
  echo "(exit ${PIPESTATUS[0]} after the $half half; cap ${cap} s)" | tee -a "$OUT/corpus_predict_gpu_$half.txt"
done
(cd "$keep" && find . -type f ! -name '*.html' -size -6M | tar czf - -T -) > "$OUT/keep.tgz"
