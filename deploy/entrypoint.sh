#!/bin/sh
# Entrypoint of the streamtopic image: run one role of the Dask cluster, or a streamtopic command.
#
#   scheduler [ARGS]            -> dask scheduler [ARGS]
#   worker [ARGS]               -> dask worker [ARGS]
#   dask-scheduler / dask-worker   the same (the dask/dask Helm chart still passes these
#                               old names; the dashed commands no longer exist in Dask)
#   streamtopic ARGS / dask ARGS / anything else: run as given
#
# STREAMTOPIC_WAIT_WORKERS=N makes a `streamtopic` command wait until N workers have joined
# the scheduler named by $STREAMTOPIC_SCHEDULER (an address or a scheduler file) before it
# starts, for up to STREAMTOPIC_WAIT_TIMEOUT seconds (default 600), so that the work is
# planned for the whole cluster rather than for the first worker to arrive.
set -eu

# BLAS pinned to one thread unless the caller says otherwise.
: "${OMP_NUM_THREADS:=1}" "${OPENBLAS_NUM_THREADS:=1}" "${MKL_NUM_THREADS:=1}"
export OMP_NUM_THREADS OPENBLAS_NUM_THREADS MKL_NUM_THREADS

wait_for_workers() {
    python - "$1" "${STREAMTOPIC_WAIT_TIMEOUT:-600}" <<'PY'
import os
import sys

from distributed import Client

n, timeout = int(sys.argv[1]), float(sys.argv[2])
target = os.environ.get("STREAMTOPIC_SCHEDULER", "")
if not target:
    sys.exit("STREAMTOPIC_WAIT_WORKERS is set but STREAMTOPIC_SCHEDULER is not")
kwargs = {"scheduler_file": target} if os.path.isfile(target) else {"address": target}
with Client(timeout=f"{timeout}s", **kwargs) as client:
    print(f"waiting for {n} worker(s) at {client.scheduler.address}", file=sys.stderr, flush=True)
    client.wait_for_workers(n, timeout=timeout)
PY
}

if [ "$#" -eq 0 ]; then
    set -- streamtopic --help
fi

case "$1" in
    scheduler|dask-scheduler)
        shift
        exec dask scheduler "$@"
        ;;
    worker|dask-worker)
        shift
        exec dask worker "$@"
        ;;
    streamtopic)
        if [ -n "${STREAMTOPIC_WAIT_WORKERS:-}" ] && [ "${STREAMTOPIC_WAIT_WORKERS}" -gt 0 ]; then
            wait_for_workers "${STREAMTOPIC_WAIT_WORKERS}"
        fi
        exec "$@"
        ;;
    *)
        exec "$@"
        ;;
esac
