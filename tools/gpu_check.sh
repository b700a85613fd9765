#!/usr/bin/env bash
# The GPU checklist (docs/gpu.md): what only a GPU can show, in one script of at most 4 minutes on one H100/H200-class
# GPU. Each step prints its figure (one line, copied into summary.txt), and the script goes on past a failed one.
#
#   bash tools/gpu_check.sh "$OUT"           # OUT: the folder that comes back; results/gpu_check unless given
#   GPU_CHECK_SMOKE=1 bash tools/gpu_check.sh /tmp/smoke   # the same steps on the CPU at toy sizes (a test runs it)
#
# OUT ends with two files: summary.txt (each step's exit code, time, limit, figure and last lines) and
# gpu_check.tar.gz (every step's output, logs, run.json and JSON; no checkpoints), rewritten after each phase, so a
# machine that returns only a few files brings everything back, and a run cut short keeps the phases before the cut.
# The steps work in a temporary folder, W in summary.txt: the tarball's root.
# Needs data/shakespeare prepared: train.bin, val.bin and meta.pkl are ignored by git, so on a machine without
# network they must travel with the working tree (a tool that copies tracked and untracked files leaves them behind).
#
# One deadline: the steps end by BUDGET - 15 s (225 of 240 s), leaving the 10 s between a step's SIGTERM and its
# SIGKILL (timeout -k 10) and the last pack inside BUDGET. Each step runs under the lesser of its own limit and the
# time left; one with under 5 s left is skipped. Steps in one phase run at once, sharing the GPU (what they measure
# is correctness, or is said to be shared below); the timed benchmarks run alone, last. Limits on a GPU, with the
# times one H200 measured at 82935b4 in brackets (results/gpu_check):
#   preflight   30 s  [5]   versions (Python, torch, Triton, CUDA, driver), the GPU and its free memory, a C compiler
#                           and Python.h for Triton, the test packages, the data: each missing thing on a line.
#                           Without a compiler, Triton or Python.h the compiled steps run eager; without data, the
#                           steps that train are skipped
#   phase A, at once (150 s at the limits, the two compiled runs its long poles):
#     precision 75 s  [59 of 60; pytest 51] the tests marked `device` (pytest -m device) on cuda: bf16 and fp16
#                           autocast for every family and impl, float32 routers, naive == fast, one graph under
#                           compile, 2-process DDP (skipped below 2 GPUs)
#     compile  150 s  [the 500-step run: no row after step 0 in 125 s beside phase A; 90-103 s at ee9dcc4] the
#                           Quickstart's X-MoD in bf16, compiled, 100 steps, evaluated every 50: step 0 eagerly, so
#                           the training graph compiles first, the top-k and causal evaluation graphs at step 50; its
#                           step-100 row times steps 50-100 after every compile; TORCH_LOGS=recompiles says in
#                           compile.txt what compiled again and why (the summary counts them)
#     graphs   150 s  [never run] the same run with --cuda_graphs=True (the training step replayed from CUDA
#                           graphs), at once with compile, so both share phase A alike: the summary sets their
#                           step-100 rows' tokens/s side by side, and train.py's count of the graphs inductor left
#                           out of CUDA graphs. Skipped without Triton's toolchain; eager, without graphs, in smoke
#     xmod      90 s  [not run eager before; ddp's 20 eager steps took 4 s] the same X-MoD eager, 500 steps,
#                           evaluated every 250: the checkpoint the next two read; then, if it finished, at once:
#       sample  45 s  [35, killed, on a step-0 checkpoint] sample.py with the KV cache; greedy cached == uncached
#                           in float32 with --window=exact, 200 new tokens (past block_size both recompute the window)
#       downstream 30 s [20] tools/downstream.py (shakespeare_next_line)
#     dense     30 s  [18]  the FLOP-matched dense partner, the same 500 steps, eager; then
#     ddp       45 s  [27 of 30] 20 X-MoD steps through torchrun + nccl, eager ("done: 20 iters, 10s"); then
#     per_gpu   45 s  [35]  4 gpu_small runs at once on the one GPU (sweeps/sweep.py --gpus=0 --per_gpu=4), eager, 1.6M
#                           tokens each (about 100 steps), with --dry_run's FLOPs before: tokens/s per run when 4
#                           share a GPU (beside phase A's compile, which takes CPU: a floor)
#   bench       55 s  [35, killed before decode] bench.py at width 128, T=1024, bf16, eager: train, causal eval,
#                           decode at batch 1
#   bench_768  140 s  [20, nothing] a d=768 12-layer dense model and its 36-layer X-MoD, T=1024, train phase, eager
#                           (MFU) then compiled (fullgraph, cold: 75-140 s): only when the deadline leaves it 60 s
# Arithmetic against 225 s: preflight 5 + phase A 150 (compile and graphs at their limit; the chains xmod -> sample
# and dense -> ddp -> per_gpu take 90 + 45 = 135 and 120 s at their limits, 80-100 expected) + bench 55 = 210 s; at
# every limit 30 + 150 + 55 = 235 s, and the deadline takes the last 10 s from bench. bench_768 is skipped at 240 s:
# GPU_CHECK_BUDGET=420 (seconds) gives it its time. graphs adds a second compile beside the first, so it adds CPU
# load to phase A (16 cores on the H200 machine) but no time to the arithmetic.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu_check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d)                                  # the steps write here; OUT gets summary.txt and the tarball
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/sum"                               # each step's lines of summary.txt, joined in ORDER after a phase
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
rm -f "$OUT/gpu_check.tar.gz"
DATA=data/shakespeare
ORDER="preflight precision compile graphs xmod sample downstream dense ddp per_gpu bench bench_768"

if [ "${GPU_CHECK_SMOKE:-0}" = 1 ]; then        # CPU, toy sizes: checks the script itself, not a GPU
    DEV=cpu; TRAIN_ARGS="--device=cpu --dtype=bfloat16 --n_embd=32 --n_head=2 --block_size=32 --batch_size=4
        --max_iters=6 --eval_interval=3 --eval_tokens=512 --warmup_iters=2 ${SMOKE_DATA:-}"
    COMPILE=False; GRAPHS=False; TESTS="-m device -k test_float32_router_is_unchanged"; export OMP_NUM_THREADS=1
    BENCH="--device=cpu --dtype=bfloat16 --contexts=40 --n_embd=32 --n_head=2 --steps=1 --rounds=1 --prompt=8
        --new_tokens=8 --extras=False --phases=train,decode_b1"
    BENCH_768="$BENCH --phases=train"; NEW_TOKENS=40; DDP_ITERS=2; NPROC_DEV=cpu; COMPILE_ITERS=""
    LIMIT_SCALE=8                                # the limits are the GPU's; a busy 2-core CPU running a phase's
    SMOKE_DIR=${SMOKE_DATA:-}; SMOKE_DIR=${SMOKE_DIR#--data_dir=}; DATA=${SMOKE_DIR:-$DATA}   # steps at once is slower
    DOWNSTREAM="--device=cpu --next_line_items=20 --task_data=$SMOKE_DIR"; SHARE="--jobs=4"
    SHARE_RUNS="dict(data_dir='$SMOKE_DIR', device='cpu', compile=False, n_embd=32, n_head=2, block_size=32, batch_size=4,
        eval_interval=3, eval_tokens=512, warmup_iters=2, dtype='bfloat16')"; SHARE_TOKENS=768
else
    DEV=cuda; TRAIN_ARGS="--max_iters=500 --eval_interval=250 --log_interval=50"; COMPILE=True; GRAPHS=True
    TESTS="-m device"
    BENCH="--device=cuda --dtype=bfloat16 --contexts=1024 --rounds=2 --extras=False
        --phases=train,eval_causal,decode_b1"
    BENCH_768="--device=cuda --dtype=bfloat16 --contexts=1024 --rounds=2 --extras=False --n_embd=768 --n_head=12
        --dense_layers=12 --batch_size=8 --phases=train"
    NEW_TOKENS=200; DDP_ITERS=20; NPROC_DEV=cuda; COMPILE_ITERS="--max_iters=100 --eval_interval=50"
    DOWNSTREAM="--device=cuda"; SHARE="--gpus=0 --per_gpu=4"
    SHARE_RUNS="dict(eval_interval=400, compile=False)"; SHARE_TOKENS=1_600_000
fi
SCALE=${LIMIT_SCALE:-1}
BUDGET=$(( ${GPU_CHECK_BUDGET:-240} * SCALE ))
START=$(date +%s)
DEADLINE=$(( START + BUDGET - 15 ))             # a step's SIGKILL (10 s after its SIGTERM) and the last pack fit

# step NAME LIMIT_S FIGURE COMMAND...: run COMMAND under the lesser of LIMIT_S and the time to the deadline, its
# output in NAME.txt; its summary lines (exit code, seconds, limit; the figure, the last output line matching the
# extended regex FIGURE, or "none"; the last lines) in sum/NAME. Safe to run in the background (`step ... &`).
step() {
    local name=$1 limit=$(( $2 * SCALE )) figure=$3; shift 3
    local left=$(( DEADLINE - $(date +%s) ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 5 ]; then skip "$name" "deadline (${left}s left)"; return; fi
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" > "$W/$name.txt" 2>&1
    local rc=$?
    {   # paths in the work folder as the tarball holds them (W/...)
        printf '%-10s rc=%-3s %4ss of %ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" "$*"
        printf '    figure: %s\n' "$(grep -E "$figure" "$W/$name.txt" | tail -1 | grep . || echo none)"
        tail -3 "$W/$name.txt" | sed 's/^/    /'
    } | sed "s|$W|W|g" | cut -c1-200 > "$W/sum/$name"
}
skip() {   # skip NAME WHY: a step that cannot run here, said in the summary
    printf '%-10s rc=%-3s %4ss  skipped: %s\n    figure: none\n' "$1" skip 0 "$2" > "$W/sum/$1"
}
collect() {   # the finished steps' lines into summary.txt in ORDER, then everything so far into the tarball
    for s in $ORDER; do
        if [ -f "$W/sum/$s" ]; then cat "$W/sum/$s" >> "$SUMMARY"; rm "$W/sum/$s"; fi
    done
    tar czf "$OUT/gpu_check.tar.gz.tmp" -C "$W" --exclude='*.pt' --exclude='*.lock' --exclude='__pycache__' \
        --exclude='./sum' . 2>/dev/null && mv "$OUT/gpu_check.tar.gz.tmp" "$OUT/gpu_check.tar.gz"
}
bench_rows() {   # bench_rows NAME: the rows its JSON holds, one summary line each (they survive a killed step)
    [ -f "$W/$1.json" ] && "$PY" -c "import json, sys
for r in json.load(open(sys.argv[1])):
    print(f\"    row: {r['model']} {r['impl']} T={r['T']} {r['phase']}: {r['tokens_per_s']:,.0f} tokens/s, ratio \"
          f\"{r['ratio_vs_dense']}, mfu {r.get('mfu', '-')}, {r['rounds']} round(s)\")" "$W/$1.json" >> "$W/sum/$1"
}

cat > "$W/preflight.py" <<'PYEOF'
import importlib, os, platform, shutil, subprocess, sys, sysconfig
dev, data = sys.argv[1], sys.argv[2]
missing = []
print(f"python {platform.python_version()}")
try:
    import torch
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
except ImportError:
    torch = None
    missing.append('torch: nothing can run')
packages = (('pytest', 'the precision step'), ('tiktoken', 'GPT-2 tokens (not the char data)'), ('matplotlib', 'plots'),
            ('tqdm', 'train.py')) + ((('triton', 'torch.compile on CUDA [compile]'),) if dev == 'cuda' else ())
for name, why in packages:
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except ImportError:
        missing.append(f"{name}: needed by {why}")
if dev == 'cuda':
    smi = shutil.which('nvidia-smi')
    if smi:
        q = subprocess.run([smi, '--query-gpu=name,driver_version,memory.used,memory.total', '--format=csv,noheader'],
                           capture_output=True, text=True, timeout=10)
        print(f"nvidia-smi: {q.stdout.strip() or q.stderr.strip()}")
    if torch is not None and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(0)
        print(f"{torch.cuda.device_count()} GPU(s); cuda:0 {torch.cuda.get_device_name(0)}, capability "
              f"{'.'.join(map(str, torch.cuda.get_device_capability(0)))}, {free / 2**30:.1f} of "
              f"{total / 2**30:.1f} GiB free, bf16 {torch.cuda.is_bf16_supported()}")
    else:
        missing.append('a CUDA device: torch.cuda.is_available() is False')
    cc = os.environ.get('CC') or next((c for c in ('cc', 'gcc', 'clang') if shutil.which(c)), None)
    print(f"C compiler: {cc and (shutil.which(cc) or cc)}")
    if not cc:
        missing.append('a C compiler (cc, gcc or clang): Triton builds its kernel launchers with it [compile]')
    header = os.path.join(sysconfig.get_paths()['include'], 'Python.h')
    if not os.path.isfile(header):
        missing.append(f"{header}: Triton's launchers include it (the python3-dev package) [compile]")
for f in ('train.bin', 'val.bin', 'meta.pkl'):
    if not os.path.isfile(os.path.join(data, f)):
        missing.append(f"{os.path.join(data, f)}: carry data/shakespeare with the working tree (docs/gpu.md) [data]")
for m in missing:
    print(f"missing: {m}")
print(f"preflight: {len(missing)} missing")
PYEOF
step preflight 30 '^preflight: ' "$PY" "$W/preflight.py" "$DEV" "$DATA"
if grep -qs '^missing: .*\[compile\]' "$W/preflight.txt"; then
    COMPILE=False; echo "    the compiled steps run eager: no toolchain for Triton" >> "$W/sum/preflight"
fi
NODATA=$(grep -cs '^missing: .*\[data\]' "$W/preflight.txt")     # none said when the preflight was skipped
collect

# the first 4 runs of gpu_small (its rate grid's dense and X-MoD at width 256) at 1.6M tokens each, at once
cat > "$W/per_gpu_sweep.py" <<PYEOF
import os, sys
sys.path.insert(0, os.path.abspath('sweeps'))
import gpu_small
name, common = 'gpu_check_per_gpu', gpu_small.common
runs = [dict(r, max_tokens=$SHARE_TOKENS, **$SHARE_RUNS) for r in gpu_small.runs[:4]]
PYEOF
BACKEND=$([ "$NPROC_DEV" = cuda ] && echo nccl || echo gloo)
train() {   # train MODEL COMPILE LIMIT [NAME [ARGS...]]: the Quickstart's run of MODEL as step NAME (default MODEL)
    local model=$1 compile=$2 limit=$3 name=${4:-$1}; shift 3; shift $(( $# > 0 ? 1 : 0 ))
    step "$name" "$limit" '^done: |^step +[0-9]+: ' "$PY" train.py --model="$model" --compile="$compile" $TRAIN_ARGS \
        "$@" --out_dir="$W/run_$name" --overwrite=True
}
finished() {   # finished RUN_DIR: its run.json says the run finished (not a checkpoint some killed step left)
    "$PY" -c "import json, sys; sys.exit(json.load(open(sys.argv[1])).get('finished') is not True)" "$1/run.json" \
        2>/dev/null
}
# phase A, all at once: the device tests; the compile proof; the eager X-MoD run, then what reads its checkpoint;
# dense, ddp and per_gpu one after another
step precision 75 ' passed| failed| error' env XMOD_TEST_DEVICE=$DEV "$PY" -m pytest -q tests $TESTS \
    -p no:cacheprovider &
if [ "${NODATA:-0}" != 0 ]; then
    for s in compile graphs xmod dense ddp per_gpu sample downstream; do skip $s "no data"; done
else
    {   # TORCH_LOGS=recompiles: each graph compiled again, and the guard that failed, in compile.txt
        TORCH_LOGS=recompiles train xmod "$COMPILE" 150 compile $COMPILE_ITERS
        echo "    recompiles logged: $(grep -c 'Recompiling function' "$W/compile.txt")" >> "$W/sum/compile"
    } &
    if [ "$GRAPHS" = True ] && [ "$COMPILE" = False ]; then
        skip graphs "no toolchain for Triton: --cuda_graphs=True needs --compile=True"
    else
        {   # train.py's "cuda_graphs:" line counts the graphs inductor did not capture
            train xmod "$COMPILE" 150 graphs $COMPILE_ITERS --cuda_graphs=$GRAPHS
            grep -s '^cuda_graphs: ' "$W/graphs.txt" | sed 's/^/    /' >> "$W/sum/graphs"
        } &
    fi
    {
        train xmod False 90
        if ! finished "$W/run_xmod"; then
            skip sample "the xmod run did not finish"; skip downstream "the xmod run did not finish"
        else
            step sample 45 '^greedy: ' bash -c "$PY sample.py --out_dir=$W/run_xmod --num_samples=1 \
                --max_new_tokens=$NEW_TOKENS --device=$DEV && for c in True False; do $PY sample.py \
                --out_dir=$W/run_xmod --num_samples=1 --max_new_tokens=$NEW_TOKENS --top_k=1 --use_cache=\$c \
                --window=exact --dtype=float32 --device=$DEV > $W/greedy_\$c.txt || exit 1; done && \
                cmp $W/greedy_True.txt $W/greedy_False.txt && \
                echo 'greedy: cached == uncached, $NEW_TOKENS tokens in float32 with --window=exact'" &
            step downstream 30 '^shakespeare_next_line ' "$PY" tools/downstream.py --out_dir="$W/run_xmod" \
                $DOWNSTREAM &
            wait
        fi
    } &
    {
        train dense False 30
        step ddp 45 '^done: ' "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 train.py --model=xmod \
            --backend=$BACKEND $TRAIN_ARGS --max_iters=$DDP_ITERS --eval_interval=$DDP_ITERS --out_dir="$W/run_ddp" \
            --overwrite=True
        step per_gpu 45 '^per_gpu: ' bash -c "$PY sweeps/sweep.py $W/per_gpu_sweep.py --out=$W/per_gpu --dry_run $SHARE && \
            $PY sweeps/sweep.py $W/per_gpu_sweep.py --out=$W/per_gpu $SHARE && for f in $W/per_gpu/*/log.csv; do \
            tail -n1 \$f | awk -F, -v run=\$(basename \$(dirname \$f)) \
            '{print \"per_gpu: \" run \" step \" \$1 \", \" \$6 \" tokens/s\"}'; done"
    } &
fi
wait
if [ -f "$W/sum/graphs" ]; then   # the two compiled runs' last training rows (steps 50-100 on the GPU), side by side
    "$PY" - "$W/run_compile/log.csv" "$W/run_graphs/log.csv" >> "$W/sum/graphs" 2>&1 <<'PYEOF'
import csv, os, sys
speed = {}
for name, path in zip(('compile', 'graphs'), sys.argv[1:]):
    rows = [r for r in csv.DictReader(open(path)) if r['tokens_per_s']] if os.path.isfile(path) else []
    speed[name] = (rows[-1]['step'], float(rows[-1]['tokens_per_s'])) if rows else None
said = [f"{n} {s[1]:,.0f} (step {s[0]})" if s else f"{n} - (no training row)" for n, s in speed.items()]
ratio = f", graphs/compile {speed['graphs'][1] / speed['compile'][1]:.2f}" if all(speed.values()) else ''
print(f"    tokens/s of the last training row, both beside phase A: {', '.join(said)}{ratio}")
PYEOF
fi
collect

# the timed benchmarks, alone on the GPU; bench_768 last, only when the deadline leaves it a minute
step bench 55 '^\| xmod ' "$PY" bench.py $BENCH --json="$W/bench.json"
bench_rows bench
collect
LEFT=$(( DEADLINE - $(date +%s) ))
if [ "$LEFT" -lt $(( 60 * SCALE )) ]; then
    skip bench_768 "deadline (${LEFT}s left, it needs $(( 60 * SCALE ))s: GPU_CHECK_BUDGET=420 gives it its time)"
else
    step bench_768 140 '^\| xmod ' "$PY" bench.py $BENCH_768 --compile=$COMPILE --json="$W/bench_768.json"
    bench_rows bench_768
fi
collect
echo "wrote $OUT: summary.txt and gpu_check.tar.gz ($(( $(date +%s) - START )) s)"
cat "$SUMMARY"
