#!/usr/bin/env bash
# The GPU checklist (README, "On a GPU"): what only a GPU can show, in one script of at most 8 minutes on one
# H100/H200-class GPU. Every step has its own time limit (480 s in all) and the script goes on past a failed one;
# everything it writes lands in one folder, with summary.txt saying which steps passed and how long each took.
#
#   bash sweeps/gpu_check.sh [OUT]           # OUT: results/gpu_check unless given
#   GPU_CHECK_SMOKE=1 bash sweeps/gpu_check.sh /tmp/smoke   # the same steps on the CPU at toy sizes (a test runs it)
#
# Needs data/shakespeare prepared (python data/shakespeare/prepare.py: a machine without internet gets the folder
# copied in). Steps:
#   1. env.txt: the GPU, driver, torch, CUDA
#   2. precision.txt: the model-level reduced-precision tests (tests/test_precision.py) on cuda: bf16 and fp16
#      autocast for every family and impl, float32 routers, naive == fast, cached == uncached generation
#   3. the Quickstart's X-MoD and its FLOP-matched dense partner in bf16, compiled, 2,000 steps each
#      (xmod_log.csv, dense_log.csv, their run.json and train logs), then 20 steps through torchrun + nccl
#   4. sample.txt: sample.py with the KV cache on the X-MoD checkpoint; greedy cached == uncached
#   5. bench.txt / bench.json: bench.py on cuda in bf16, compiled, at T=1024; bench_768.*: a d=768 12-layer dense
#      model and its X-MoD, for MFU
#   6. downstream.txt / downstream.json: downstream.py (shakespeare_next_line) on the X-MoD checkpoint
#   7. per_gpu.txt: 4 gpu_small runs at once on the one GPU (sweep.py --gpus=0 --per_gpu=4), each cut to about
#      100 steps (max_tokens=1.6M), with --dry_run's FLOPs before: what sharing one GPU gives, in tokens/s per run
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu_check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

if [ "${GPU_CHECK_SMOKE:-0}" = 1 ]; then        # CPU, toy sizes: checks the script itself, not a GPU
    DEV=cpu; TRAIN_ARGS="--device=cpu --dtype=bfloat16 --n_embd=32 --n_head=2 --block_size=32 --batch_size=4
        --max_iters=6 --eval_interval=3 --eval_tokens=512 --warmup_iters=2 ${SMOKE_DATA:-}"
    COMPILE=False; TESTS_K="test_float32_router_is_unchanged"; export OMP_NUM_THREADS=1
    BENCH="--device=cpu --dtype=bfloat16 --contexts=40 --n_embd=32 --n_head=2 --steps=1 --rounds=1 --prompt=8
        --new_tokens=8 --extras=False --phases=train,decode_b1"
    BENCH_768="$BENCH --phases=train"; NEW_TOKENS=20; DDP_ITERS=2; NPROC_DEV=cpu
    LIMIT_SCALE=6                                # the limits are the GPU's; a busy 2-core CPU is slower
    SMOKE_DIR=${SMOKE_DATA:-}; SMOKE_DIR=${SMOKE_DIR#--data_dir=}
    DOWNSTREAM="--device=cpu --next_line_items=20 --task_data=$SMOKE_DIR"; SHARE="--jobs=4"
    SHARE_RUNS="dict(data_dir='$SMOKE_DIR', device='cpu', compile=False, n_embd=32, n_head=2, block_size=32, batch_size=4,
        eval_interval=3, eval_tokens=512, warmup_iters=2, dtype='bfloat16')"; SHARE_TOKENS=768
else
    DEV=cuda; TRAIN_ARGS="--max_iters=2000 --eval_interval=500"; COMPILE=True; TESTS_K="not train and not bench"
    BENCH="--device=cuda --dtype=bfloat16 --compile=True --contexts=1024 --rounds=2 --extras=False"
    BENCH_768="$BENCH --n_embd=768 --n_head=12 --dense_layers=12 --batch_size=8 --phases=train,eval_causal"
    NEW_TOKENS=300; DDP_ITERS=20; NPROC_DEV=cuda
    DOWNSTREAM="--device=cuda"; SHARE="--gpus=0 --per_gpu=4"
    SHARE_RUNS="dict(eval_interval=400)"; SHARE_TOKENS=1_600_000
fi

step() {   # step NAME LIMIT_S COMMAND...: run it with a time limit, its output in OUT/NAME.txt, one summary line
    local name=$1 limit=$(( $2 * ${LIMIT_SCALE:-1} )); shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
    local rc=$?
    printf '%-10s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$*" | cut -c1-200 >> "$SUMMARY"
    tail -3 "$OUT/$name.txt" | sed 's/^/    /' >> "$SUMMARY"
}

step env 10 bash -c "nvidia-smi 2>/dev/null | head -15; $PY -c 'import torch; print(torch.__version__, \
torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))'"
step precision 40 env XMOD_TEST_DEVICE=$DEV $PY -m pytest -q -x tests/test_precision.py -k "$TESTS_K" -p no:cacheprovider
for model in xmod dense; do
    step "$model" $([ $model = xmod ] && echo 90 || echo 50) $PY train.py --model=$model --compile=$COMPILE $TRAIN_ARGS --out_dir="$OUT/run_$model" \
        --overwrite=True
    cp "$OUT/run_$model/log.csv" "$OUT/${model}_log.csv" 2>/dev/null
    cp "$OUT/run_$model/run.json" "$OUT/${model}_run.json" 2>/dev/null
done
BACKEND=$([ "$NPROC_DEV" = cuda ] && echo nccl || echo gloo)
step ddp 30 $PY -m torch.distributed.run --standalone --nproc_per_node=1 train.py --model=xmod --backend=$BACKEND \
    $TRAIN_ARGS --max_iters=$DDP_ITERS --eval_interval=$DDP_ITERS --out_dir="$OUT/run_ddp" --overwrite=True
step sample 25 bash -c "$PY sample.py --out_dir=$OUT/run_xmod --num_samples=1 --max_new_tokens=$NEW_TOKENS \
    --device=$DEV && for c in True False; do $PY sample.py --out_dir=$OUT/run_xmod --num_samples=1 \
    --max_new_tokens=$NEW_TOKENS --top_k=1 --use_cache=\$c --device=$DEV > $OUT/greedy_\$c.txt || exit 1; done \
    && cmp $OUT/greedy_True.txt $OUT/greedy_False.txt && echo 'greedy: cached == uncached'"
step bench 60 $PY bench.py $BENCH --json="$OUT/bench.json"
step bench_768 60 $PY bench.py $BENCH_768 --json="$OUT/bench_768.json"
step downstream 40 $PY downstream.py --out_dir="$OUT/run_xmod" $DOWNSTREAM
cp "$OUT/run_xmod/downstream.json" "$OUT/downstream.json" 2>/dev/null
# 4 runs of gpu_small (seed 0's widths-128-to-384 dense points and the reference X-MoD) at 1.6M tokens each, at once
cat > "$OUT/per_gpu_sweep.py" <<PYEOF
import runpy
spec = runpy.run_path('sweeps/gpu_small.py')
name, common = 'gpu_check_per_gpu', spec['common']
runs = [dict(r, max_tokens=$SHARE_TOKENS, **$SHARE_RUNS) for r in spec['runs'][:4]]
PYEOF
step per_gpu 75 bash -c "$PY sweep.py $OUT/per_gpu_sweep.py --out=$OUT/per_gpu --dry_run $SHARE && \
    $PY sweep.py $OUT/per_gpu_sweep.py --out=$OUT/per_gpu $SHARE && \
    tail -qn1 $OUT/per_gpu/*/log.csv | cut -d, -f1,5,6,9"
rm -rf "$OUT"/run_*/ckpt.pt "$OUT"/per_gpu/*/ckpt.pt
echo "wrote $OUT (summary.txt):"
cat "$SUMMARY"
