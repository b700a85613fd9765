#!/usr/bin/env bash
# The compute ladder (sweeps/gpu_ladder.py, docs/ladder.md) and its analysis (law/ladder.py) in one call of at most
# 6 minutes on one H200-class GPU.
#
#   bash sweeps/gpu_ladder.sh "$OUT"                           # OUT: results/gpu_ladder unless given
#   GPU_LADDER_SMOKE=1 bash sweeps/gpu_ladder.sh /tmp/ladder  # toy sizes on the CPU (a test runs it)
#
# OUT ends with 6 files: ladder.md (the summary table and the verdict), ladder.json (the fit), delta.png,
# curves.png, runs.tar.gz (every run's log.csv, run.json and train.log; no checkpoints) and sweep.txt (sweeps/sweep.py's
# --dry_run, its output and the times). Needs data/shakespeare prepared (train.bin, val.bin, meta.pkl, ignored by
# git: they must travel with the working tree).
# Time, against 360 s (GPU_LADDER_BUDGET): the sweep gets 360 - 40 = 320 s (SIGTERM; SIGKILL 10 s later), the 60
# runs about 200 s by the model in sweeps/gpu_ladder.py; the analysis and packing about 15 s and the rest of the 30 s.
# A sweep cut by its limit leaves its finished runs, which the analysis reads (and sweep.txt says what was cut).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu_ladder}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
START=$(date +%s)
if [ "${GPU_LADDER_SMOKE:-0}" = 1 ]; then
    BUDGET=${GPU_LADDER_BUDGET:-400}; SLOTS=""; export OMP_NUM_THREADS=1   # the sweep file's jobs, on the CPU
else
    BUDGET=${GPU_LADDER_BUDGET:-360}
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # 20 runs' allocators on one GPU: less fragmentation
    SLOTS="--gpus=0 --per_gpu=$("$PY" -c "import runpy; print(runpy.run_path('sweeps/gpu_ladder.py')['PER_GPU'])")"
fi
LOG="$OUT/sweep.txt"
rm -f "$OUT"/{ladder.md,ladder.json,delta.png,curves.png,runs.tar.gz}
"$PY" sweeps/sweep.py sweeps/gpu_ladder.py --out="$W/runs" --dry_run > "$LOG" 2>&1
timeout -k 10 $(( BUDGET - 40 )) "$PY" sweeps/sweep.py sweeps/gpu_ladder.py --out="$W/runs" $SLOTS >> "$LOG" 2>&1
echo "sweep: exit code $? after $(( $(date +%s) - START )) s (124: stopped at its limit of $(( BUDGET - 40 )) s)" \
    >> "$LOG"
"$PY" -m law.ladder "$W/runs" --out "$OUT" >> "$LOG" 2>&1
echo "analysis: exit code $? at $(( $(date +%s) - START )) s" >> "$LOG"
tar czf "$OUT/runs.tar.gz" -C "$W" --exclude='*.pt' --exclude='*.lock' runs
echo "wrote $OUT in $(( $(date +%s) - START )) s: $(cd "$OUT" && ls | tr '\n' ' ')" | tee -a "$LOG"
