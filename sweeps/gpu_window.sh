#!/usr/bin/env bash
# One GPU window (docs/ladder.md): the compute ladder's missing runs (sweeps/gpu_ladder.py), their analysis with every
# earlier window's runs (law/ladder.py), then speed rows, all ending by 9 minutes. Run it first whenever a GPU is lent.
#
#   bash sweeps/gpu_window.sh "$OUT"                       # OUT: what comes back (8 files)
#   GPU_WINDOW_SMOKE=1 GPU_LADDER_DATA=DIR bash sweeps/gpu_window.sh /tmp/w    # the same at toy sizes on the CPU (CI)
#
# Needs: data/pycode/cache/sympy-1.14.0.tar.gz (7.8 MB, ignored by git: carry it with the tree; `python
# data/pycode/prepare.py` fetches it once where pip reaches PyPI). The corpus is prepared from it here (about 2 s; the
# sdist's sha256 is checked by prepare.py) and the prepared train.bin and val.bin are checked against the sha256 the
# ladder pins (sweeps/gpu_ladder.py CORPUS): a window whose corpus differs trains no ladder run, and says so.
# Knobs (environment):
#   GPU_LADDER_PRIOR    earlier windows' folders, ':'-separated (default: every results/gpu_ladder/windows/*): their
#                       finished runs (runs.tar.gz) are done, and only the rest is trained
#   GPU_WINDOW_BUDGET   seconds the whole script may take (default 540: 9 minutes of a 15-minute window)
#   GPU_WINDOW_SPEED_S  seconds kept at the end for the speed rows (default 170); the ladder stops by
#                       BUDGET - SPEED_S - 20 (its cut runs are retrained in the next window), and the speed rows take
#                       whatever the ladder leaves, so a window with little ladder left measures all of them
#   GPU_WINDOW_SLOTS    ladder runs at once on the GPU (default sweeps/gpu_ladder.py SLOTS, 16)
#   GPU_WINDOW_SMOKE    1: toy sizes on the CPU (GPU_LADDER_SMOKE=1 for the plan); GPU_LADDER_DATA: its corpus
#   PYTHON              the interpreter (default python3)
# OUT ends with at most 8 files:
#   window.txt   the log: the plan's dry run before, the sweep's output, each step's exit code and time, the speed rows
#   window.json  this window: date, device, torch, git commit / uncommitted changes / sha256 of `git diff HEAD` / the
#                untracked files (not in that diff), the corpus's sha256, the prior windows, the runs trained here and
#                the ones cut
#   runs.tar.gz  the ladder runs finished here (runs/<name>/ log.csv, run.json, train.log; no checkpoints) and the
#                speed rows' logs (speed/<row>/): committed under results/gpu_ladder/windows/<date>_<device>/ with
#                window.json, it is the next window's prior
#   ladder.md, ladder.json, delta.png, curves.png   law/ladder.py over the prior's runs and this window's
#   speed.md     tokens/s of dense and X-MoD s4 at the ladder's widest and narrowest rungs: eager, compiled, compiled
#                with --cuda_graphs (the last training row of a run evaluated at 0, STEPS/2, STEPS: steps after the
#                mid evaluation, every compile done), one row at a time alone on the GPU; a row that does not fit the
#                deadline is skipped and says so
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bash sweeps/gpu_window.sh OUT}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
START=$(date +%s)
if [ "${GPU_WINDOW_SMOKE:-0}" = 1 ]; then
    export GPU_LADDER_SMOKE=1 OMP_NUM_THREADS=1
    BUDGET=${GPU_WINDOW_BUDGET:-900}; SPEED_S=${GPU_WINDOW_SPEED_S:-200}; SLOTS=""; DEV=cpu
    DATA=${GPU_LADDER_DATA:?GPU_WINDOW_SMOKE=1 needs GPU_LADDER_DATA, a tiny corpus}
    SPEED="--device=cpu --dtype=float32 --threads=1 --data_dir=$DATA --block_size=32 --eval_tokens=512"
    SPEED_WIDTHS="24:8"; STEPS=4; COMPILE_OK=0
else
    BUDGET=${GPU_WINDOW_BUDGET:-540}; SPEED_S=${GPU_WINDOW_SPEED_S:-170}; DEV=cuda
    SLOTS="--gpus=0 --per_gpu=${GPU_WINDOW_SLOTS:-16}"; DATA=data/pycode
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # 16 runs' allocators on one GPU: less fragmentation
    SPEED="--device=cuda --dtype=bfloat16 --dataset=pycode --block_size=128 --eval_tokens=16384"
    SPEED_WIDTHS="112:128 32:32"; STEPS=60; COMPILE_OK=1     # width:rows of 128 tokens, the ladder's top and bottom
fi
LADDER_END=$(( START + BUDGET - SPEED_S - 20 ))
END=$(( START + BUDGET - 20 ))                 # the speed rows stop here; packing the files takes the last 20 s
export GPU_LADDER_RUNS="$W/runs"
LOG="$OUT/window.txt"
rm -f "$OUT"/{window.txt,window.json,runs.tar.gz,ladder.md,ladder.json,delta.png,curves.png,speed.md}
say() { echo "$*" | tee -a "$LOG"; }
at() { echo "$(( $(date +%s) - START )) s"; }
mkdir -p "$W/runs" "$W/speed"

# 1. the corpus, prepared here from the carried sdist and checked against the plan's pinned sha256
if [ "${GPU_WINDOW_SMOKE:-0}" != 1 ] && { [ ! -f "$DATA/train.bin" ] || [ ! -f "$DATA/val.bin" ]; }; then
    "$PY" data/pycode/prepare.py >> "$LOG" 2>&1; say "prepare data/pycode: exit code $? at $(at)"
fi
# 2. the prior: its windows' finished runs unpacked where the sweep writes, so sweeps/sweep.py skips them
PRIOR=${GPU_LADDER_PRIOR:-$(ls -d results/gpu_ladder/windows/*/ 2>/dev/null | tr '\n' ':')}
export GPU_LADDER_PRIOR="$PRIOR"
cat > "$W/window.py" <<'PYEOF'
import glob, hashlib, json, os, subprocess, sys, tarfile, time
what, W, OUT, data = sys.argv[1:5]
sha = lambda p: hashlib.sha256(open(p, 'rb').read()).hexdigest() if os.path.isfile(p) else None
finished = lambda d: json.load(open(os.path.join(d, 'run.json'))).get('finished') is True \
    if os.path.isfile(os.path.join(d, 'run.json')) else False
priors = [p for p in os.environ.get('GPU_LADDER_PRIOR', '').split(':') if p]
if what == 'prior':        # unpack the prior's runs; the corpus must be theirs; -> the runs it holds
    corpus = {s: sha(os.path.join(data, f'{s}.bin')) for s in ('train', 'val')}
    pinned = None if os.environ.get('GPU_LADDER_SMOKE') == '1' else json.loads(sys.argv[5])
    bad = [f"{s}.bin sha256 {corpus[s]}, the ladder pins {pinned[s]}" for s in corpus if pinned and corpus[s] != pinned[s]]
    for p in priors:
        wj = os.path.join(p, 'window.json')
        seen = json.load(open(wj)).get('corpus_sha256') if os.path.isfile(wj) else None
        if seen and seen != corpus:
            bad.append(f"the prior window {p} trained on another corpus ({seen})")
        if os.path.isfile(os.path.join(p, 'runs.tar.gz')):
            with tarfile.open(os.path.join(p, 'runs.tar.gz')) as tar:
                tar.extractall(W, members=[m for m in tar.getmembers() if m.name.startswith('runs/')])
    json.dump(dict(corpus_sha256=corpus, bad=bad, prior=sorted(d for d in os.listdir(os.path.join(W, 'runs'))
                                                                  if finished(os.path.join(W, 'runs', d)))),
              open(os.path.join(W, 'prior.json'), 'w'))
    print('\n'.join(f'corpus: {b}' for b in bad) or f"corpus: {data}, sha256 as the ladder pins" +
          ('' if pinned else ' (smoke: not pinned)'))
    sys.exit(3 if bad else 0)
if what == 'record':       # window.json: what ran where, and which runs this window trained
    state = json.load(open(os.path.join(W, 'prior.json')))
    git = lambda *a: subprocess.run(['git', *a], capture_output=True, timeout=30)
    head, diff, others = git('rev-parse', 'HEAD'), git('diff', 'HEAD'), git('ls-files', '--others', '--exclude-standard')
    inside = head.returncode == 0
    device = 'cpu'
    try:
        import torch
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'
        tv = torch.__version__
    except ImportError:
        tv = None
    runs = sorted(os.listdir(os.path.join(W, 'runs')))
    new = [d for d in runs if finished(os.path.join(W, 'runs', d)) and d not in state['prior']]
    cut = [d for d in runs if not finished(os.path.join(W, 'runs', d))]
    json.dump(dict(date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), device=device, torch=tv,
                   git_commit=head.stdout.decode().strip() if inside else '',
                   git_dirty=bool(diff.stdout) if inside else None,
                   git_diff_sha256=hashlib.sha256(diff.stdout).hexdigest() if inside and diff.stdout else '',
                   git_untracked=others.stdout.decode().split() if inside else None,     # not in the diff
                   corpus_sha256=state['corpus_sha256'], prior=priors, prior_runs=len(state['prior']), runs=new,
                   cut=cut, seconds=int(sys.argv[5])), open(os.path.join(OUT, 'window.json'), 'w'), indent=1)
    open(os.path.join(W, 'new.txt'), 'w').write(''.join(f'runs/{d}\n' for d in new))
    print(f"window.json: {len(new)} runs trained here, {len(cut)} cut, {len(state['prior'])} from the prior")
if what == 'speed':        # speed.md from the rows' log.csv: the last training row's tokens/s
    rows = ['| width | model | mode | tokens/s (last training row) | step | seconds | exit |', '|---|---|---|---|---|---|---|']
    for line in open(os.path.join(W, 'speed', 'rows.txt')):
        name, rc, secs = line.split()
        log = os.path.join(W, 'speed', name, 'log.csv')
        tps = [r.split(',') for r in open(log).read().splitlines()[1:]] if os.path.isfile(log) else []
        tps = [r for r in tps if len(r) > 5 and r[5]]
        w, model, mode = name.split('_', 2)
        rows.append(f"| {w[1:]} | {model} | {mode} | {float(tps[-1][5]):,.0f} | {tps[-1][0]} | {secs} | {rc} |" if tps
                    else f"| {w[1:]} | {model} | {mode} | - | - | {secs} | {rc} |")
    open(os.path.join(OUT, 'speed.md'), 'w').write('\n'.join(rows) + '\n')
    print('\n'.join(rows))
PYEOF
if [ "${GPU_WINDOW_SMOKE:-0}" = 1 ]; then PINNED=null     # the smoke's corpus is not pinned: no Python start for it
else PINNED=$("$PY" -c "import json, sys; sys.path.insert(0, 'sweeps'); import gpu_ladder; print(json.dumps(gpu_ladder.CORPUS['sha256']))")
fi
"$PY" "$W/window.py" prior "$W" "$OUT" "$DATA" "$PINNED" >> "$LOG" 2>&1
CORPUS_OK=$?
say "prior: ${PRIOR:-none}; corpus check exit code $CORPUS_OK at $(at)"

# 3. the ladder's missing runs, until LADDER_END (SIGTERM, SIGKILL 10 s later)
"$PY" sweeps/gpu_ladder.py --dry_run >> "$LOG" 2>&1
LEFT=$(( LADDER_END - $(date +%s) ))
if [ "$CORPUS_OK" != 0 ]; then
    say "ladder: skipped, the corpus differs (above)"
elif [ "$LEFT" -lt 30 ]; then
    say "ladder: skipped, ${LEFT} s left"
else
    timeout -k 10 "$LEFT" "$PY" sweeps/sweep.py sweeps/gpu_ladder.py --out="$W/runs" $SLOTS >> "$LOG" 2>&1
    say "ladder: exit code $? at $(at) (124: stopped at its limit of $LEFT s)"
fi
"$PY" "$W/window.py" record "$W" "$OUT" "$DATA" "$(( $(date +%s) - START ))" >> "$LOG" 2>&1
WINDOWS=$(echo "$PRIOR" | tr ':' ' ')
if ls "$W"/runs/*/run.json > /dev/null 2>&1; then
    "$PY" -m law.ladder "$W/runs" --out "$OUT" --windows $WINDOWS "$OUT" >> "$LOG" 2>&1
    say "analysis: exit code $? at $(at)"
fi

# 4. speed rows, one at a time alone on the GPU, until END: tokens/s of dense and X-MoD s4, eager, compiled, graphs
: > "$W/speed/rows.txt"
for WR in $SPEED_WIDTHS; do
    WIDTH=${WR%%:*}; ROWS=${WR##*:}
    for ROW in dense:eager xmod:eager xmod:compiled xmod:graphs dense:compiled dense:graphs; do
        MODEL=${ROW%%:*}; MODE=${ROW##*:}; NAME="d${WIDTH}_${MODEL}_${MODE}"
        LEFT=$(( END - $(date +%s) ))
        if [ "$MODE" != eager ] && [ "$COMPILE_OK" != 1 ]; then echo "$NAME skip 0" >> "$W/speed/rows.txt"; continue; fi
        if [ "$LEFT" -lt 15 ]; then echo "$NAME deadline 0" >> "$W/speed/rows.txt"; continue; fi
        CAP=$([ "$MODE" = eager ] && echo 60 || echo 150)        # a row's own limit: one slow compile leaves the rest
        [ "$LEFT" -gt "$CAP" ] && LEFT=$CAP
        ARGS="--model=$MODEL --n_embd=$WIDTH --n_head=$(( WIDTH / 16 > 0 ? WIDTH / 16 : 1 )) --batch_size=$ROWS"
        [ "$MODEL" = xmod ] && ARGS="$ARGS --stride=4 --n_layer=12 --dense_layers=4"
        [ "$MODE" != eager ] && ARGS="$ARGS --compile=True"
        [ "$MODE" = graphs ] && ARGS="$ARGS --cuda_graphs=True"
        T0=$(date +%s)
        timeout -k 5 "$LEFT" "$PY" train.py $SPEED $ARGS --max_iters=$STEPS --eval_interval=$(( STEPS / 2 )) \
            --warmup_iters=2 --out_dir="$W/speed/$NAME" --overwrite=True > "$W/speed/$NAME.log" 2>&1
        echo "$NAME $? $(( $(date +%s) - T0 ))" >> "$W/speed/rows.txt"
    done
done
"$PY" "$W/window.py" speed "$W" "$OUT" "$DATA" >> "$LOG" 2>&1
say "speed rows: $(grep -c . "$W/speed/rows.txt") at $(at)"

# 5. pack: the ladder runs finished here and the speed rows' logs (no checkpoints), this machine's folders written W
#    and OUT (no machine paths in what is committed)
find "$W/runs" "$W/speed" \( -name run.json -o -name '*.log' -o -name '*.csv' \) -exec sed -i "s|$W|W|g" {} +
tar czf "$OUT/runs.tar.gz" -C "$W" --exclude='*.pt' --exclude='*.lock' -T "$W/new.txt" speed
say "wrote $OUT in $(at): $(cd "$OUT" && ls | tr '\n' ' ')"
sed -i "s|$W|W|g; s|$OUT|OUT|g" "$LOG"
