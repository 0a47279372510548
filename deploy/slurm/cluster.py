r"""Start a Dask cluster on SLURM with dask-jobqueue, for streamtopic.

Builds ``dask_jobqueue.SLURMCluster()`` from ``jobqueue.yaml`` (next to this script), submits
``--jobs`` worker jobs, writes a scheduler file and prints the scheduler's address and dashboard.
The scheduler lives in this process: keep it running while you work, then stop it with Ctrl-C
or SIGTERM, which cancels the worker jobs. From another shell::

    streamtopic ingest CORPUS --store /shared/st.zarr --scheduler-file /shared/scheduler.json
    streamtopic fit /shared/st.zarr -k 100 -o /shared/model.zarr \
        --scheduler-file /shared/scheduler.json

Run it on a login node (or inside a batch job, see streamtopic.sbatch), on a host the compute
nodes can reach. ``--print-job-script`` shows the batch script of one worker job and exits
without submitting anything.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_config(path: Path) -> None:
    """Merge a dask config file (such as jobqueue.yaml) into the active dask config."""
    import dask
    import yaml

    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    dask.config.update(dask.config.config, cfg, priority="new")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=HERE / "jobqueue.yaml",
                   help="dask config file with a jobqueue.slurm section (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=int(os.environ.get("STREAMTOPIC_JOBS", 4)),
                   help="SLURM worker jobs to submit (default: $STREAMTOPIC_JOBS or 4)")
    p.add_argument("--scheduler-file", type=Path, default=Path("scheduler.json"),
                   help="where to write the scheduler file; put it on a shared filesystem")
    p.add_argument("--wait", type=int, default=0, metavar="N",
                   help="wait until N workers have joined before printing the address")
    p.add_argument("--print-job-script", action="store_true",
                   help="print one worker job's batch script and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_config(args.config)

    from dask_jobqueue import SLURMCluster
    from distributed import Client

    cluster = SLURMCluster()
    try:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        client = Client(cluster)
        client.write_scheduler_file(str(args.scheduler_file))
        cluster.scale(jobs=args.jobs)
        print(f"scheduler:      {cluster.scheduler_address}", flush=True)
        print(f"scheduler file: {args.scheduler_file.resolve()}", flush=True)
        print(f"dashboard:      {cluster.dashboard_link}", flush=True)
        if args.wait:
            client.wait_for_workers(args.wait)
            print(f"{args.wait} workers joined", flush=True)

        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
        client.close()
    finally:
        cluster.close()
        if not args.print_job_script:
            args.scheduler_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
