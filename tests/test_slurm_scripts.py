"""Job scripts and SLURM settings, without a cluster.

Rendered scripts are compared with committed golden files in tests/golden/; a
missing golden file is a failure (write it on purpose, after reading it).
"""

import pathlib

import pytest

from engine._config import ConfigError
from engine._slurm import Resources, array_script, check_script, resolve

GOLDEN = pathlib.Path(__file__).parent / "golden"
PYTHON = "/opt/rollsweep/.venv/bin/python"
STORE = pathlib.Path("/scratch/results/pingpong_spin_ratio.zarr")
FOLDER = STORE / "_rollsweep" / "slurm"

RESOURCE_SETS = {
    "array_default": Resources(python=PYTHON),
    "array_gpu": Resources(partition="gpu", gpus=1, cores=8, memory="32G", walltime="04:00:00", tasks=4,
                           setup=("module load cuda/12.6",), python=PYTHON),
    "array_account_extra": Resources(partition="long", account="mech-lab", memory="16G", walltime="2-00:00:00",
                                     extra_directives=("--qos=low", "--constraint=avx512"), tasks=16,
                                     python=PYTHON),
}


def golden(name: str) -> str:
    path = GOLDEN / f"{name}.sbatch"
    assert path.exists(), f"golden file missing: {path} (render it, read it, commit it)"
    return path.read_text()


@pytest.mark.parametrize("name", sorted(RESOURCE_SETS))
def test_array_script_matches_golden(name):
    resources = RESOURCE_SETS[name]
    script = array_script(resources, STORE, FOLDER / "share-20260101T000000-1.json", "rollsweep-pingpong-0123abcd",
                          min(resources.tasks, 10), FOLDER)
    assert script == golden(name)


def test_check_script_matches_golden():
    script = check_script(RESOURCE_SETS["array_default"], STORE, "rollsweep-pingpong-0123abcd", "4242", FOLDER)
    assert script == golden("check")


def test_rendering_is_pure():
    r = RESOURCE_SETS["array_gpu"]
    first = array_script(r, STORE, "s.json", "job", 3, FOLDER)
    assert first == array_script(r, STORE, "s.json", "job", 3, FOLDER)
    assert r == RESOURCE_SETS["array_gpu"]  # frozen, untouched


def test_settings_resolve_keyword_then_sweep_then_user_file(tmp_path):
    user = tmp_path / "slurm.toml"
    user.write_text('[slurm]\npartition = "user-part"\naccount = "user-acct"\nmemory = "8G"\n')
    resources = resolve({"partition": "sweep-part", "memory": "6G"}, {"memory": "2G", "cores": None}, "s.toml",
                        user_file=user)
    assert (resources.partition, resources.account, resources.memory) == ("sweep-part", "user-acct", "2G")
    assert resources.cores == 1 and resources.walltime == "01:00:00"  # defaults


@pytest.mark.parametrize("table, key, reason", [
    ({"queue": "x"}, "slurm.queue", "unknown key"),
    ({"cores": 0}, "slurm.cores", "positive integer"),
    ({"extra_directives": "--qos=low"}, "slurm.extra_directives", "list of strings"),
    ({"memory": 4}, "slurm.memory", "must be a string"),
])
def test_bad_slurm_settings_name_the_key(tmp_path, table, key, reason):
    with pytest.raises(ConfigError) as err:
        resolve(table, {}, "sweep.toml", user_file=tmp_path / "none.toml")
    assert err.value.key == key and reason in err.value.reason and err.value.file == "sweep.toml"
