#!/usr/bin/env bash
# A Slurm job array over a sweep: one array task per unfinished run, each a train.py command from
# `python sweeps/sweep.py SWEEP --commands` (one a line, resumable: --init_from=auto). From the repository root:
#
#   python sweeps/gpu_small.py --commands > my_results/gpu_small.cmds
#   sbatch --array=1-$(wc -l < my_results/gpu_small.cmds)%8 sweeps/slurm_array.sh my_results/gpu_small.cmds
#   python sweeps/gpu_small.py --dry_run        # progress: finished / partial / running, FLOPs left
#
# %8 runs at most 8 tasks at once. A task that is preempted or requeued resumes from its last checkpoint; a task
# whose run another trainer already writes stops at once (exit 2, one line naming it: train.py's lock). When the
# array is done, fit as usual: python fit_law.py results/gpu_small/runs --tuned --out results/gpu_small
# Edit the #SBATCH lines for your cluster (partition, account, time); the python on PATH must have torch.
#SBATCH --job-name=xmod-sweep
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --output=slurm-%A_%a.out
set -euo pipefail
CMDS=$(realpath "${1:?usage: sbatch --array=1-N sweeps/slurm_array.sh COMMANDS_FILE}")
cd "${SLURM_SUBMIT_DIR:-.}"               # the commands run from the repository root, where sbatch was called
LINE=$(sed -n "${SLURM_ARRAY_TASK_ID:?not a Slurm array task}p" "$CMDS")
[ -n "$LINE" ] || { echo "no line ${SLURM_ARRAY_TASK_ID} in $CMDS" >&2; exit 2; }
echo "task ${SLURM_ARRAY_TASK_ID}: $LINE"
eval "$LINE"
