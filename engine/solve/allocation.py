"""The cores and memory this process may use: the smallest of what the machine
has, what its CPU affinity allows, what SLURM allocated to the job and what its
cgroup (v2 or v1) limits it to. A job on a shared node sees the node's cores and
memory through os.cpu_count and psutil; sizing shards to those would
oversubscribe the job or get it killed for memory."""

import math
import os
import pathlib

CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")
PROC_CGROUP = pathlib.Path("/proc/self/cgroup")
_MIB = 1 << 20
# cgroup v1 writes "no limit" as a page-rounded 2**63 - 1.
_V1_UNLIMITED = 1 << 60


def cores(cgroup_root=CGROUP_ROOT, proc_cgroup=PROC_CGROUP) -> int:
    found = [len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1]
    found += [n for n in (_env_int("SLURM_CPUS_PER_TASK"), _env_int("SLURM_CPUS_ON_NODE")) if n]
    found += _cgroup_cpus(pathlib.Path(cgroup_root), pathlib.Path(proc_cgroup))
    return max(1, min(found))


def memory_bytes(cgroup_root=CGROUP_ROOT, proc_cgroup=PROC_CGROUP) -> int:
    import psutil

    found = [psutil.virtual_memory().total]
    per_node = _env_int("SLURM_MEM_PER_NODE")
    if per_node:
        found.append(per_node * _MIB)
    per_cpu = _env_int("SLURM_MEM_PER_CPU")
    cpus = _env_int("SLURM_CPUS_PER_TASK") or _env_int("SLURM_CPUS_ON_NODE") or 1
    if per_cpu:
        found.append(per_cpu * cpus * _MIB)
    found += _cgroup_memory(pathlib.Path(cgroup_root), pathlib.Path(proc_cgroup))
    return min(found)


def _env_int(name: str) -> int | None:
    """A SLURM count; SLURM_CPUS_ON_NODE may read "4(x2)" on heterogeneous jobs."""
    value = os.environ.get(name, "").split("(")[0].strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _read(path: pathlib.Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _groups(proc_cgroup: pathlib.Path) -> list[tuple[str, str]]:
    """(controllers, path) of each hierarchy this process belongs to; "" names v2's unified one."""
    text = _read(proc_cgroup) or ""
    return [tuple(line.split(":", 2)[1:]) for line in text.splitlines() if line.count(":") >= 2]


def _chain(base: pathlib.Path, relative: str) -> list[pathlib.Path]:
    """The process's cgroup folder and its ancestors up to `base`: a parent's
    limit binds its children too."""
    folder = base / relative.strip("/")
    chain = [folder]
    while folder != base and base in folder.parents:
        folder = folder.parent
        chain.append(folder)
    return chain


def _folders(root: pathlib.Path, proc_cgroup: pathlib.Path, v1_controller: str) -> tuple[list, list]:
    """(v2 folders, v1 folders of `v1_controller`) that may hold this process's limits."""
    v2, v1 = [], []
    for controllers, relative in _groups(proc_cgroup):
        if controllers == "":
            v2 += _chain(root, relative)
        elif v1_controller in controllers.split(","):
            for mount in (root / controllers, root / v1_controller):
                if mount.is_dir():
                    v1 += _chain(mount, relative)
                    break
    return v2, v1


def _cgroup_cpus(root: pathlib.Path, proc_cgroup: pathlib.Path) -> list[int]:
    v2, v1 = _folders(root, proc_cgroup, "cpu")
    limits = []
    for folder in v2:
        quota, _, period = (_read(folder / "cpu.max") or "max").partition(" ")
        if quota.isdigit() and period.isdigit():
            limits.append(math.ceil(int(quota) / int(period)))
    for folder in v1:
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota and period and quota.isdigit() and period.isdigit():  # quota -1: no limit
            limits.append(math.ceil(int(quota) / int(period)))
    return limits


def _cgroup_memory(root: pathlib.Path, proc_cgroup: pathlib.Path) -> list[int]:
    v2, v1 = _folders(root, proc_cgroup, "memory")
    limits = [int(value) for value in (_read(f / "memory.max") for f in v2) if value and value.isdigit()]
    limits += [int(value) for value in (_read(f / "memory.limit_in_bytes") for f in v1)
               if value and value.isdigit() and int(value) < _V1_UNLIMITED]
    return limits
