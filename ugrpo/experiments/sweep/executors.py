"""Where the training runs of a sweep execute: in this process, on a local process pool, or on Ray.

Every backend calls the same :func:`train_one` with the same :class:`~ugrpo.experiments.sweep.lm.RunSpec`
(validated config, seed) and the same folder, and every worker trains with a fixed number of torch
threads, so a run's numbers do not depend on where it ran (tested: pool = in-process = Ray).

:func:`train_one` decides from the folder itself whether to skip (``results.json``), resume (a
checkpoint) or start over (anything else is removed), so a retried or re-submitted run always
continues from its last checkpoint.

Ray (``--ray``, the optional ``ugrpo[ray]`` extra): ``ray.init(address=...)`` joins an existing
cluster (``--ray-address``, or ``$RAY_ADDRESS``); without one a local Ray starts with
``workers * cpus_per_run`` CPUs (all of the machine's CPUs and GPUs when runs ask for GPUs). Each
run is one Ray task with the resource request ``num_cpus=cpus_per_run, num_gpus=gpus_per_run``.
On a cluster the ``--out`` folder must be on storage every node mounts at the same path (runs write
their checkpoints and metrics there); the driver checks that each finished run's ``results.json``
is visible and says so if it is not.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RayOptions", "Job", "run_state", "train_one", "run_jobs", "import_ray", "driver_context", "ray_train"]

FORWARDED_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                 "HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM",
                 "UGRPO_CACHE")
"""environment variables a Ray task takes from the driver where its node does not set them: where models and
data are cached and whether to go online; never credentials (``HF_TOKEN``: a node that needs one sets its own)"""
RAY_CONNECT_TIMEOUT_S = 15.0
"""how long ``--ray-address host:port`` may take to answer before the sweep stops with an error"""


@dataclass(frozen=True)
class RayOptions:
    """How ``--ray`` runs the sweep."""

    address: str | None = None
    """cluster to join (``auto``, ``ray://host:10001``, ``host:6379``); None = ``$RAY_ADDRESS`` or a local Ray"""
    cpus_per_run: float = 1.0
    """CPUs each run's task asks for (also its torch threads, rounded down, at least 1)"""
    gpus_per_run: float = 0.0
    """GPUs each run's task asks for (0 = train on CPU)"""

    def __post_init__(self) -> None:
        if not self.cpus_per_run > 0:
            raise ValueError(f"--ray-cpus must be > 0, got {self.cpus_per_run}")
        if not self.gpus_per_run >= 0:
            raise ValueError(f"--ray-gpus must be >= 0, got {self.gpus_per_run}")


@dataclass(frozen=True)
class Job:
    """One run to execute: its :class:`~ugrpo.experiments.sweep.lm.RunSpec` and the folder it trains into."""

    spec: Any
    folder: str

    @property
    def name(self) -> str:
        return self.spec.name


def run_state(folder: Path) -> str:
    """'done' (results.json), 'resume' (a checkpoint), 'restart' (a folder without a checkpoint) or 'start'.

    Nothing is deleted here: a run that died before its first checkpoint is started over by ``train(...,
    resume=True)`` itself, under the run's lock (so a process still writing the folder is never pulled from under).
    """
    from ugrpo.runs import finished_results
    from ugrpo.train.checkpoint import latest_checkpoint

    if finished_results(folder) is not None:  # results.json next to UNFINISHED: stopped part way, resumed
        return "done"
    if latest_checkpoint(folder / "checkpoints") is not None:
        return "resume"
    return "restart" if folder.exists() else "start"


def train_one(spec: Any, folder: str) -> str:
    """Train one run to its end (skip / resume / start from the folder's state); console output (the step lines and
    warnings, not the training bar: the sweep shows its own) to ``train.log``."""
    from ugrpo.train.loop import train

    state = run_state(Path(folder))
    if state != "done":
        Path(folder).mkdir(parents=True, exist_ok=True)
        with open(Path(folder) / "train.log", "a") as log, contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            train(spec.cfg, folder, resume=state in ("resume", "restart"), progress=False)
    return spec.name


def run_jobs(jobs: Sequence[Job], *, workers: int, ray: RayOptions | None, bar) -> None:
    """Execute every job; ``bar`` (tqdm) advances once per finished run. A failed run raises naming its log."""
    if ray is not None:
        _ray(jobs, workers, ray, bar)
    elif workers == 1:
        _in_process(jobs, bar)
    else:
        _pool(jobs, workers, bar)


def _failed(name: str, folder: str, e: BaseException) -> RuntimeError:
    return RuntimeError(f"run {name} failed: {e} (see {Path(folder) / 'train.log'}); rerun the same command to resume "
                        "the other runs")


# ---------------------------------------------------------------------------------------------- local


def _in_process(jobs: Sequence[Job], bar) -> None:
    """One run after another in this process, one torch thread like a worker (no spawn cost)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for j in jobs:
            bar.set_postfix_str(j.name)
            train_one(j.spec, j.folder)
            bar.update(1)
    finally:
        torch.set_num_threads(before)


def _init_worker(driver: int | None = None) -> None:
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    if driver is not None:
        die_with(driver)


def die_with(driver: int) -> None:
    """End this process when ``driver`` (its parent) dies, even by SIGKILL: PR_SET_PDEATHSIG on Linux, and a
    thread that checks the parent once a second everywhere (an orphaned worker would go on writing run folders)."""
    import signal
    import threading
    import time

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == driver:
            time.sleep(1.0)
        os._exit(1)

    if os.getppid() != driver:  # died before the signal was armed
        os._exit(1)
    threading.Thread(target=watch, name="ugrpo-driver-watch", daemon=True).start()


def make_pool(workers: int):
    """A spawn process pool whose workers run one torch thread and die with this process."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_init_worker,
                               initargs=(os.getpid(),))


def _pool(jobs: Sequence[Job], workers: int, bar) -> None:
    from concurrent.futures import FIRST_COMPLETED, wait

    ex = make_pool(workers)
    try:
        pending = {ex.submit(train_one, j.spec, j.folder): j for j in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                j = pending.pop(f)
                try:
                    f.result()
                except Exception as e:
                    raise _failed(j.name, j.folder, e) from e
                bar.set_postfix_str(j.name)
                bar.update(1)
    except BaseException:
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


# ---------------------------------------------------------------------------------------------- Ray


def driver_context() -> dict[str, Any]:
    """What a Ray task needs from the driver: working directory (relative paths in configs), the
    driver's own import paths (custom reward modules) and the HF / ugrpo environment variables."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}

    def installed(p: str) -> bool:  # the interpreter's own stdlib / site-packages: every node has its own
        r = os.path.realpath(p)
        return any(r == q or r.startswith(q.rstrip(os.sep) + os.sep) for q in prefixes)

    paths = [p for p in sys.path if p and os.path.isdir(p) and not installed(p)]
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
    env.setdefault("HF_HUB_OFFLINE", "1")
    return {"cwd": os.getcwd(), "sys_path": paths, "env": env}


def ray_train(spec: Any, folder: str, ctx: dict[str, Any], threads: int) -> dict[str, Any]:
    """The body of one Ray task: adopt the driver's context where this node lacks it, then :func:`train_one`."""
    import socket

    import torch

    for k, v in ctx["env"].items():
        os.environ.setdefault(k, v)
    for p in reversed(ctx["sys_path"]):
        if p not in sys.path and os.path.isdir(p):
            sys.path.insert(0, p)
    if os.path.isdir(ctx["cwd"]):
        os.chdir(ctx["cwd"])
    torch.set_num_threads(threads)
    train_one(spec, folder)
    return {"name": spec.name, "node": socket.gethostname()}


def import_ray():
    """The ``ray`` module, or a ValueError saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ValueError("--ray needs Ray, which is not installed: pip install 'ugrpo[ray]' (or pip install ray); "
                         "or drop --ray to use the local process pool") from e
    return ray


def local_ray_options(cpus: int | None) -> dict[str, Any]:
    """``ray.init`` arguments of a local Ray: no dashboard, the node advertised at the loopback address.

    Not a network boundary: Ray 2.x's raylet, GCS and worker gRPC servers still listen on all interfaces (Ray
    offers no option to bind them to the loopback), so on a shared network a firewall must keep their ports
    closed."""
    return {"num_cpus": cpus, "include_dashboard": False, "log_to_driver": False,
            "object_store_memory": 128 * 1024 ** 2, "_node_ip_address": "127.0.0.1"}


def check_reachable(address: str, timeout: float | None = None) -> None:
    """A ``host:port`` or ``ray://host:port`` address must accept a TCP connection within ``timeout`` seconds
    (``ray.init`` itself retries for minutes); ``auto`` and addresses without a port are left to Ray."""
    import socket

    from ugrpo.errors import UserError

    timeout = RAY_CONNECT_TIMEOUT_S if timeout is None else timeout
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise UserError(f"--ray-address {address}: nothing answers there within {timeout:g} s ({e}); start the cluster "
                        "(`ray start --head`), fix the address, or drop --ray-address for a local Ray") from None


def _ray(jobs: Sequence[Job], workers: int, opts: RayOptions, bar) -> None:
    ray = import_ray()
    address = opts.address or os.environ.get("RAY_ADDRESS")
    started = not ray.is_initialized()
    if started:
        if address:  # join a running cluster; its resources set the parallelism
            check_reachable(address)
            try:
                ray.init(address=address, log_to_driver=False)
            except ConnectionError as e:
                raise ValueError(f"--ray-address {address}: no Ray cluster there ({e}). Start one (`ray start --head`) "
                                 "or drop --ray-address (and unset RAY_ADDRESS) for a local Ray") from e
        else:  # a local Ray sized like the process pool would be; with GPUs per run, the GPUs set the pace
            cpus = max(1, int(workers * opts.cpus_per_run)) if opts.gpus_per_run == 0 else None
            ray.init(**local_ray_options(cpus))
    try:
        gpus = float(ray.cluster_resources().get("GPU", 0))
        if gpus > 0 and opts.gpus_per_run == 0:
            print(f"note: the Ray cluster has {gpus:g} GPUs but each run asks for none (runs train on CPU); "
                  "pass --ray-gpus 1 to give each run a GPU", file=sys.stderr, flush=True)
        task = ray.remote(num_cpus=opts.cpus_per_run, num_gpus=opts.gpus_per_run, max_retries=1)(ray_train)
        ctx, threads = driver_context(), max(1, int(opts.cpus_per_run))
        pending = {task.remote(j.spec, os.path.abspath(j.folder), ctx, threads): j for j in jobs}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    j = pending.pop(ref)
                    try:
                        info = ray.get(ref)
                    except Exception as e:
                        raise _failed(j.name, j.folder, e) from e
                    if not (Path(j.folder) / "results.json").exists():
                        raise RuntimeError(
                            f"run {j.name} finished on Ray node {info['node']}, but {Path(j.folder) / 'results.json'} "
                            "is not visible here: --out must be on storage every Ray node mounts at the same path "
                            "(e.g. NFS)")
                    bar.set_postfix_str(j.name)
                    bar.update(1)
        except BaseException:
            for ref in pending:  # finished runs stay; unfinished ones resume from their checkpoints next time
                ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()
