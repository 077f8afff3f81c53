"""Config fuzzing: random mutations of every study's demo sweeps.

Each mutated sweep either validates, or `validate` and `run` both fail with one
line naming the file, the key and the reason: never a traceback, never a
partial store. Fixed seed and a bounded example count here; `-m slow` runs many
more.
"""

import re
import tomllib

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import available_studies
from engine.cli.commands import main

SWEEPS = [text for name, load in sorted(available_studies().items()) for text in load().demo_configs.values()]
ERROR = re.compile(r"^rollsweep: error: (?P<file>[^:]+): (?P<key>[^:]+): (?P<reason>.+)$")

values = st.one_of(
    st.integers(min_value=-10**15, max_value=10**15),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.booleans(),
    st.lists(st.one_of(st.integers(-5, 5), st.floats(-10, 10), st.text(max_size=3)), max_size=4),
    st.dictionaries(st.sampled_from(["linspace", "logspace", "values", "x"]),
                    st.lists(st.one_of(st.integers(-3, 10**8), st.floats(-5, 5)), max_size=4), max_size=2),
)


def paths(doc, prefix=()):
    for key, value in doc.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from paths(value, prefix + (key,))


@st.composite
def mutated(draw):
    doc = tomllib.loads(draw(st.sampled_from(SWEEPS)))
    for _ in range(draw(st.integers(1, 3))):
        all_paths = list(paths(doc))
        path = draw(st.sampled_from(all_paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete":
            parent.pop(path[-1], None)
        elif action == "add":
            parent[draw(st.sampled_from(["extra", "speed", "v", "spin_ratio", "rtol", "out"]))] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return doc


def check(doc, tmp_path, capsys):
    out = tmp_path / "fuzz.zarr"
    if isinstance(doc.get("run"), dict):
        doc["run"]["out"] = str(out)  # never write outside the test folder
    path = tmp_path / "fuzz.toml"
    try:
        path.write_text(tomli_w.dumps(doc))
    except (TypeError, ValueError):
        return  # not representable as TOML (e.g. NaN keys): nothing a user could write
    capsys.readouterr()
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    if code == 0:
        assert not out.exists()
        return
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ERROR.match(lines[0]), err
    assert ERROR.match(lines[0])["file"] == str(path)
    assert main(["run", str(path), "--executor", "inline", "--quiet"]) == 2  # refused alike
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["fuzz.toml"]


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=mutated())
def test_fuzzed_sweeps_validate_or_fail_cleanly(doc, tmp_path, capsys):
    check(doc, tmp_path, capsys)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=mutated())
def test_fuzzed_sweeps_many(doc, tmp_path, capsys):
    check(doc, tmp_path, capsys)


def test_every_study_is_fuzzed():
    assert len(SWEEPS) >= 10  # every study's demo sweeps seed the mutations
