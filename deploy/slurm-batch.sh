#!/usr/bin/env bash
# daskflow inside one SLURM allocation: scheduler + one dask-cuda worker per GPU + the run.
#   sbatch --nodes=N --gpus-per-node=G deploy/slurm-batch.sh CONFIG.yaml     (RESTART=1 to continue)
#SBATCH --job-name=daskflow
#SBATCH --time=12:00:00
#SBATCH --signal=B:TERM@120
set -euo pipefail
config=${1:?usage: slurm-batch.sh CONFIG.yaml}
scheduler_file=${SLURM_SUBMIT_DIR:-$PWD}/scheduler-${SLURM_JOB_ID:-local}.json
# Dask's own messages over TCP: the pencils travel over NCCL (cluster.comm: auto), and UCX's progress
# loop would compete with the GPU tasks for the GIL (docs/performance.md)
dask scheduler --scheduler-file "$scheduler_file" --protocol tcp --dashboard-address 127.0.0.1:8787 &
while [ ! -f "$scheduler_file" ]; do sleep 1; done
# workers keep freed field-sized blocks instead of page-faulting fresh ones (daskflow.cluster.WORKER_MALLOC)
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824
srun --ntasks-per-node=1 dask cuda worker --scheduler-file "$scheduler_file" --protocol tcp &
restart=()
[ "${RESTART:-0}" = 1 ] && restart=(--restart)
# run in the background so the batch shell can forward SLURM's TERM to it
daskflow run "$config" --cluster "scheduler-file:$scheduler_file" "${restart[@]}" &
run=$!
trap 'kill -TERM "$run"' TERM
# wait returns early whenever the trap fires; wait again until the run itself has ended (finished its
# segment and written its checkpoint), so the allocation does not end first; exit with its status.
while true; do
  wait "$run" && status=0 || status=$?
  kill -0 "$run" 2>/dev/null || break
done
exit "$status"
