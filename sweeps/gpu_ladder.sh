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
# Time, against 360 s (GPU_LADDER_BUDGET): the two phases of the sweep end by 360 - 40 = 320 s (SIGTERM; SIGKILL
# 10 s later): `top`, the 6 width-512 runs alone on the GPU (about 130 s by the first H200 run's measurements,
# sweeps/gpu_ladder.py), then `rest`, the 36 runs at widths 256 and 128, 16 at once, with what is left (about 165 s
# needed); the analysis and packing (5 s on the first run) in the last 30 s. A phase cut by the deadline leaves its
# finished runs, which the analysis reads (sweep.txt says what was cut); `rest` is skipped with under 30 s left.
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
    BUDGET=${GPU_LADDER_BUDGET:-400}; export OMP_NUM_THREADS=1   # the sweep file's jobs, on the CPU
else
    BUDGET=${GPU_LADDER_BUDGET:-360}
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # 16 runs' allocators on one GPU: less fragmentation
fi
SWEEP_END=$(( START + BUDGET - 40 ))
LOG="$OUT/sweep.txt"
rm -f "$OUT"/{ladder.md,ladder.json,delta.png,curves.png,runs.tar.gz}
"$PY" sweeps/sweep.py sweeps/gpu_ladder.py --out="$W/runs" --dry_run > "$LOG" 2>&1
for PHASE in top rest; do      # the widest runs alone on the GPU, then the others packed (sweeps/gpu_ladder.py)
    LEFT=$(( SWEEP_END - $(date +%s) ))
    if [ "$LEFT" -lt 30 ]; then echo "sweep $PHASE: skipped, ${LEFT} s left" >> "$LOG"; continue; fi
    SLOTS=""
    if [ "${GPU_LADDER_SMOKE:-0}" != 1 ]; then
        SLOTS="--gpus=0 --per_gpu=$("$PY" -c "import runpy, sys
print(runpy.run_path('sweeps/gpu_ladder.py')['PER_GPU'][sys.argv[1]])" "$PHASE")"
    fi
    GPU_LADDER_PHASE=$PHASE timeout -k 10 "$LEFT" "$PY" sweeps/sweep.py sweeps/gpu_ladder.py --out="$W/runs" \
        $SLOTS >> "$LOG" 2>&1
    echo "sweep $PHASE: exit code $? at $(( $(date +%s) - START )) s (124: stopped at its limit of $LEFT s)" >> "$LOG"
done
"$PY" -m law.ladder "$W/runs" --out "$OUT" >> "$LOG" 2>&1
echo "analysis: exit code $? at $(( $(date +%s) - START )) s" >> "$LOG"
tar czf "$OUT/runs.tar.gz" -C "$W" --exclude='*.pt' --exclude='*.lock' runs
echo "wrote $OUT in $(( $(date +%s) - START )) s: $(cd "$OUT" && ls | tr '\n' ' ')" | tee -a "$LOG"
