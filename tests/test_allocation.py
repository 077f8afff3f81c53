"""Cores and memory of the job's allocation, from fake cgroup trees and SLURM variables."""

import os

import psutil
import pytest

from engine.solve.allocation import cores, memory_bytes

GIB = 1 << 30
SLURM_VARS = ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU")


@pytest.fixture(autouse=True)
def no_slurm(monkeypatch):
    for name in SLURM_VARS:
        monkeypatch.delenv(name, raising=False)


def machine_cores():
    return len(os.sched_getaffinity(0))


def fake_v2(tmp_path, cpu_max=None, memory_max=None, parent_memory_max=None, group="/job_7/step_0"):
    root = tmp_path / "cgroup"
    leaf = root / group.strip("/")
    leaf.mkdir(parents=True)
    if cpu_max is not None:
        (leaf / "cpu.max").write_text(cpu_max + "\n")
    if memory_max is not None:
        (leaf / "memory.max").write_text(memory_max + "\n")
    if parent_memory_max is not None:
        (leaf.parent / "memory.max").write_text(parent_memory_max + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"0::{group}\n")
    return root, proc


def fake_v1(tmp_path, quota, period, limit, group="/slurm/uid_1/job_7"):
    root = tmp_path / "cgroup"
    cpu = root / "cpu,cpuacct" / group.strip("/")
    memory = root / "memory" / group.strip("/")
    cpu.mkdir(parents=True)
    memory.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (cpu / "cpu.cfs_period_us").write_text(f"{period}\n")
    (memory / "memory.limit_in_bytes").write_text(f"{limit}\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"5:cpu,cpuacct:{group}\n4:memory:{group}\n1:name=systemd:/init.scope\n")
    return root, proc


def test_nothing_known_is_the_machine(tmp_path):
    root, proc = fake_v2(tmp_path)
    assert cores(root, proc) == machine_cores()
    assert memory_bytes(root, proc) == psutil.virtual_memory().total


def test_slurm_variables_bound_cores_and_memory(tmp_path, monkeypatch):
    root, proc = fake_v2(tmp_path)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "4(x2)")
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "1024")  # MiB
    assert cores(root, proc) == 1
    assert memory_bytes(root, proc) == min(GIB, psutil.virtual_memory().total)


def test_memory_per_cpu_counts_the_task_cpus(tmp_path, monkeypatch):
    root, proc = fake_v2(tmp_path)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "100")
    assert memory_bytes(root, proc) == 200 * (1 << 20)


def test_cgroup_v2_limits_and_a_parent_limit(tmp_path):
    root, proc = fake_v2(tmp_path, cpu_max="150000 100000", memory_max="max", parent_memory_max=str(3 * GIB))
    assert cores(root, proc) == min(2, machine_cores())  # 1.5 CPUs of quota: 2 threads can use it
    assert memory_bytes(root, proc) == min(3 * GIB, psutil.virtual_memory().total)


def test_cgroup_v2_no_limit(tmp_path):
    root, proc = fake_v2(tmp_path, cpu_max="max 100000", memory_max="max")
    assert cores(root, proc) == machine_cores()
    assert memory_bytes(root, proc) == psutil.virtual_memory().total


def test_cgroup_v1_limits(tmp_path):
    root, proc = fake_v1(tmp_path, quota=100000, period=100000, limit=512 * (1 << 20))
    assert cores(root, proc) == 1
    assert memory_bytes(root, proc) == 512 * (1 << 20)


def test_cgroup_v1_unlimited(tmp_path):
    root, proc = fake_v1(tmp_path, quota=-1, period=100000, limit=9223372036854771712)
    assert cores(root, proc) == machine_cores()
    assert memory_bytes(root, proc) == psutil.virtual_memory().total


def test_smallest_applies_across_sources(tmp_path, monkeypatch):
    root, proc = fake_v2(tmp_path, cpu_max="100000 100000", memory_max=str(2 * GIB))
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "4096")
    assert cores(root, proc) == 1
    assert memory_bytes(root, proc) == min(2 * GIB, psutil.virtual_memory().total)


def test_unreadable_cgroup_files_are_ignored(tmp_path):
    assert cores(tmp_path / "absent", tmp_path / "absent_proc") == machine_cores()
    assert memory_bytes(tmp_path / "absent", tmp_path / "absent_proc") == psutil.virtual_memory().total
