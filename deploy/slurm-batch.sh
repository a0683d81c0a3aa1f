#!/usr/bin/env bash
# daskflow inside one SLURM allocation: scheduler + one dask-cuda worker per GPU + the run.
#   sbatch --nodes=N --gpus-per-node=G deploy/slurm-batch.sh CONFIG.yaml     (RESTART=1 to continue)
# TLS_CA_FILE, TLS_CERT and TLS_KEY (PEM files, the same as the config's cluster.tls) make the
# scheduler and the workers accept only peers with a certificate of that CA (deploy/README.md)
#SBATCH --job-name=daskflow
#SBATCH --time=12:00:00
#SBATCH --signal=B:TERM@120
set -euo pipefail
config=${1:?usage: slurm-batch.sh CONFIG.yaml}
scheduler_file=${SLURM_SUBMIT_DIR:-$PWD}/scheduler-${SLURM_JOB_ID:-local}.json
# Dask's own messages over TCP (or TLS): the pencils travel over NCCL (cluster.comm: auto), and UCX's
# progress loop would compete with the GPU tasks for the GIL (docs/performance.md)
protocol=tcp
tls=()
if [ -n "${TLS_CA_FILE:-}${TLS_CERT:-}${TLS_KEY:-}" ]; then
  protocol=tls
  tls=(--tls-ca-file "${TLS_CA_FILE:?TLS_CA_FILE, TLS_CERT and TLS_KEY go together}"
       --tls-cert "${TLS_CERT:?TLS_CA_FILE, TLS_CERT and TLS_KEY go together}"
       --tls-key "${TLS_KEY:?TLS_CA_FILE, TLS_CERT and TLS_KEY go together}")
  # the dashboard and the workers' /metrics over HTTPS with the same certificate
  export DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__CERT=$TLS_CERT
  export DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TLS__KEY=$TLS_KEY
fi
dask scheduler --scheduler-file "$scheduler_file" --protocol "$protocol" "${tls[@]}" \
  --dashboard-address 127.0.0.1:8787 &
while [ ! -f "$scheduler_file" ]; do sleep 1; done
# workers keep freed field-sized blocks instead of page-faulting fresh ones (daskflow.cluster.WORKER_MALLOC)
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824
srun --ntasks-per-node=1 dask cuda worker --scheduler-file "$scheduler_file" --protocol "$protocol" "${tls[@]}" &
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
