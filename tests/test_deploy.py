"""Static checks of deploy/: every YAML file parses and has the structure the docs promise,
the Dockerfile pins BLAS and installs the package, and dask-jobqueue renders a SLURM job script
from deploy/slurm/jobqueue.yaml (without SLURM). Nothing here needs Docker, SLURM or Kubernetes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # a test dependency: a missing one is a failure, not a skip

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
BLAS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
MEMORY_KEYS = ("TARGET", "SPILL", "PAUSE", "TERMINATE")


def load(rel: str) -> list:
    with open(DEPLOY / rel) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def env_dict(env) -> dict[str, str]:
    """A compose (mapping or KEY=VALUE list) or Kubernetes (name/value list) env as a dict."""
    if isinstance(env, dict):
        return {k: str(v) for k, v in env.items()}
    out = {}
    for item in env or []:
        if isinstance(item, dict):
            out[item["name"]] = str(item.get("value"))
        else:
            k, _, v = str(item).partition("=")
            out[k] = v
    return out


def as_args(cmd) -> list[str]:
    return [str(a) for a in cmd] if isinstance(cmd, list) else str(cmd).split()


def option(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def test_every_yaml_file_parses():
    files = sorted(DEPLOY.rglob("*.yaml")) + sorted(DEPLOY.rglob("*.yml"))
    assert len(files) >= 6
    for path in files:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        assert docs, path


# --- Dockerfile --------------------------------------------------------------------------------


def test_dockerfile():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    for var in BLAS:
        assert re.search(rf"^ENV {var}=1\s*$", text, re.M), var
    assert re.search(r"^RUN pip install \.", text, re.M)
    assert re.search(r"^COPY streamtopic ", text, re.M) and "pyproject.toml" in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "ENTRYPOINT" in text and "8786" in text and "8787" in text
    # the entrypoint it copies exists, is valid sh, and maps the roles to the modern CLI
    entry = DEPLOY / "entrypoint.sh"
    assert "deploy/entrypoint.sh" in text and entry.exists()
    subprocess.run(["sh", "-n", str(entry)], check=True)
    body = entry.read_text()
    assert "dask scheduler" in body and "dask worker" in body


# --- docker compose ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    (doc,) = load("docker-compose.yml")
    return doc


def test_compose_services_and_shared_volume(compose):
    services = compose["services"]
    assert {"scheduler", "worker", "job"} <= set(services)
    mounts = {}
    for name in ("scheduler", "worker", "job"):
        vols = services[name].get("volumes", [])
        named = {}
        for v in vols:
            if isinstance(v, dict):
                named[v["source"]] = v["target"]
            else:
                src, dst = str(v).split(":")[:2]
                named[src] = dst
        mounts[name] = named
    shared = set.intersection(*(set(m) for m in mounts.values()))
    shared &= set(compose.get("volumes", {}))          # a named, top-level volume
    assert shared, mounts
    for vol in shared:
        assert len({m[vol] for m in mounts.values()}) == 1   # same path everywhere


def test_compose_scheduler(compose):
    sched = compose["services"]["scheduler"]
    args = as_args(sched["command"])
    assert args[:2] == ["dask", "scheduler"]
    ports = " ".join(str(p) for p in sched["ports"])
    assert "8786:8786" in ports and "8787:8787" in ports


def test_compose_worker(compose):
    worker = compose["services"]["worker"]
    args = as_args(worker["command"])
    assert args[:2] == ["dask", "worker"]
    assert "tcp://scheduler:8786" in args
    assert option(args, "--nthreads") == "1"
    assert option(args, "--memory-limit")
    env = env_dict(worker["environment"])
    for var in BLAS:
        assert env[var] == "1"
    for key in MEMORY_KEYS:
        assert 0 < float(env[f"DASK_DISTRIBUTED__WORKER__MEMORY__{key}"]) < 1
    assert int(worker["deploy"]["replicas"]) >= 1
    assert worker["deploy"]["resources"]["limits"]["memory"]


def test_compose_job(compose):
    job = compose["services"]["job"]
    command = " ".join(as_args(job["command"]))
    assert "streamtopic fit" in command and "tcp://scheduler:8786" in command
    env = env_dict(job["environment"])
    assert env["STREAMTOPIC_SCHEDULER"] == "tcp://scheduler:8786"
    for var in BLAS:
        assert env[var] == "1"


# --- Kubernetes ----------------------------------------------------------------------------------


def test_daskcluster():
    (dc,) = load("kubernetes/daskcluster.yaml")
    assert dc["apiVersion"] == "kubernetes.dask.org/v1"
    assert dc["kind"] == "DaskCluster"
    name = dc["metadata"]["name"]
    worker = dc["spec"]["worker"]
    assert worker["replicas"] >= 1
    (wc,) = worker["spec"]["containers"]
    args = as_args(wc["args"])
    assert args[:2] == ["dask", "worker"]
    assert option(args, "--nthreads") == "1" and option(args, "--memory-limit")
    env = env_dict(wc["env"])
    for var in BLAS:
        assert env[var] == "1"
    assert wc["resources"]["limits"]["memory"] and wc["resources"]["limits"]["cpu"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in worker["spec"]["volumes"] if "persistentVolumeClaim" in v}
    mounted = {m["name"]: m["mountPath"] for m in wc["volumeMounts"]}
    assert mounted.get("store") == "/data" and claims.get("store") == "streamtopic-store"

    sched = dc["spec"]["scheduler"]
    (sc,) = sched["spec"]["containers"]
    assert as_args(sc["args"])[:2] == ["dask", "scheduler"]
    service = sched["service"]
    assert service["selector"] == {"dask.org/cluster-name": name,
                                   "dask.org/component": "scheduler"}
    ports = {p["name"]: p["port"] for p in service["ports"]}
    assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}


def test_pvc():
    (pvc,) = load("kubernetes/pvc.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert pvc["metadata"]["name"] == "streamtopic-store"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_job():
    (job,) = load("kubernetes/job.yaml")
    (cluster,) = load("kubernetes/daskcluster.yaml")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    (fit,) = pod["containers"]
    args = as_args(fit["args"])
    assert args[:2] == ["streamtopic", "fit"]
    address = f"tcp://{cluster['metadata']['name']}-scheduler:8786"
    assert option(args, "--scheduler") == address
    env = env_dict(fit["env"])
    for var in BLAS:
        assert env[var] == "1"
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
    assert claims["store"] == "streamtopic-store"
    assert {m["name"]: m["mountPath"] for m in fit["volumeMounts"]}["store"] == "/data"


def test_helm_values():
    (values,) = load("kubernetes/helm-values.yaml")
    worker = values["worker"]
    assert worker["image"]["repository"] and worker["image"]["tag"]
    assert values["scheduler"]["image"]["repository"] == worker["image"]["repository"]
    assert worker["replicas"] >= 1
    assert str(worker["threads_per_worker"]) == "1"
    assert worker["resources"]["limits"]["memory"]
    env = env_dict(worker["env"])
    for var in BLAS:
        assert env[var] == "1"
    mounts = worker["mounts"]
    assert {m["name"]: m["mountPath"] for m in mounts["volumeMounts"]}["store"] == "/data"
    assert any(v.get("persistentVolumeClaim", {}).get("claimName") == "streamtopic-store"
               for v in mounts["volumes"])
    assert values["jupyter"]["enabled"] is False


# --- SLURM ---------------------------------------------------------------------------------------


def test_jobqueue_config_keys():
    (cfg,) = load("slurm/jobqueue.yaml")
    slurm = cfg["jobqueue"]["slurm"]
    for key in ("cores", "memory", "processes", "walltime", "local-directory",
                "job-extra-directives", "worker-extra-args", "job-script-prologue"):
        assert key in slurm, key
    assert slurm["cores"] == slurm["processes"]          # one thread per worker process
    prologue = "\n".join(slurm["job-script-prologue"])
    for var in BLAS:
        assert f"export {var}=1" in prologue
    for key in MEMORY_KEYS:
        assert f"DASK_DISTRIBUTED__WORKER__MEMORY__{key}=" in prologue


def test_sbatch_script():
    path = DEPLOY / "slurm" / "streamtopic.sbatch"
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    assert text.startswith("#!/bin/bash")
    for directive in ("--nodes", "--cpus-per-task", "--mem", "--time"):
        assert re.search(rf"^#SBATCH {directive}=", text, re.M), directive
    assert "dask scheduler --scheduler-file" in text
    assert re.search(r"srun .*\\\n\s*dask worker --scheduler-file", text)
    assert re.search(r"streamtopic ingest .*--scheduler-file", text)
    assert re.search(r"streamtopic fit .*--scheduler-file", text)
    assert "deploy/slurm/cluster.py" in text
    for var in BLAS:
        assert var + "=1" in text


def test_slurm_cluster_script_compiles():
    path = DEPLOY / "slurm" / "cluster.py"
    source = path.read_text()
    compile(source, str(path), "exec")
    assert 'if __name__ == "__main__":' in source and "SLURMCluster(" in source


def test_jobqueue_renders_slurm_job_script():
    """dask-jobqueue renders the worker job script from jobqueue.yaml, with no SLURM present."""
    import dask
    import dask_jobqueue as jq
    (cfg,) = load("slurm/jobqueue.yaml")
    slurm = cfg["jobqueue"]["slurm"]
    # dotted keys: override each jobqueue.slurm setting, keep the package's other defaults
    with dask.config.set({f"jobqueue.slurm.{k}": v for k, v in slurm.items()}):
        # the scheduler starts in this process; keep it on loopback with a free dashboard port
        with jq.SLURMCluster(scheduler_options={"host": "127.0.0.1",
                                                "dashboard_address": ":0"}) as cluster:
            script = cluster.job_script()
    directives = re.findall(r"^#SBATCH (.*)$", script, re.M)
    assert f"--cpus-per-task={slurm['cores']}" in directives
    assert f"--mem={slurm['job-mem']}" in directives
    assert f"-t {slurm['walltime']}" in directives
    for extra in slurm["job-extra-directives"]:
        assert extra in directives
    for line in slurm["job-script-prologue"]:
        assert line in script
    worker = next(line for line in script.splitlines()
                  if "distributed.cli.dask_worker" in line or re.search(r"dask\S* worker", line))
    assert "--nthreads 1" in worker
    assert f"--nworkers {slurm['processes']}" in worker
    assert "--memory-limit 3.50GiB" in worker               # 28 GiB / 8 processes
    assert "--local-directory $TMPDIR" in worker
    assert sys.executable in worker or "python" in worker


# --- Dask settings -------------------------------------------------------------------------------


def _flat(tree: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flat(v, key) if isinstance(v, dict) else {key: str(v)})
    return out


def test_dask_settings_file_is_the_local_clusters_and_dask_reads_it(tmp_path):
    """deploy/dask.yaml holds exactly streamtopic.cluster.CLUSTER_CONFIG; the image copies it
    where Dask looks, the SLURM scripts point DASK_CONFIG at it, and Dask, given it through
    DASK_CONFIG as on SLURM, reads every setting from it."""
    import json

    from streamtopic.cluster import CLUSTER_CONFIG

    (doc,) = load("dask.yaml")
    assert _flat(doc) == CLUSTER_CONFIG
    docker = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^COPY deploy/dask\.yaml /etc/dask/\S+\.yaml$", docker, re.M)
    sbatch = (DEPLOY / "slurm" / "streamtopic.sbatch").read_text()
    assert re.search(r"^export DASK_CONFIG=.*deploy/dask\.yaml", sbatch, re.M)
    (cfg,) = load("slurm/jobqueue.yaml")
    assert any(line.startswith("export DASK_CONFIG=") and "deploy/dask.yaml" in line
               for line in cfg["jobqueue"]["slurm"]["job-script-prologue"])
    code = ("import dask, json; print(json.dumps({k: dask.config.get(k) for k in "
            f"{sorted(CLUSTER_CONFIG)!r}}}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DASK_CONFIG": str(DEPLOY / "dask.yaml"),
                              "HOME": str(tmp_path)}, check=True)
    assert json.loads(res.stdout) == CLUSTER_CONFIG
