"""A cube damaged beyond its shards: what a reader reads besides the shards'
chunks (each array's metadata, the coordinates, the stored config), a cube
missing its markers or its metadata, a failed --overwrite, and a damaged
kernel library in the compile cache.

`verify` finds each, says in one line whether a run repairs it, and the next
`rollsweep run` repairs what it said it would; what no run repairs it names
with what to do. A damaged cube is refused by every command in one line,
with nothing written. One cube is solved for the module (the grid program
of tests/test_damage.py's sweep: 8 points a call) and copied for each test.
"""

import json
import os
import pathlib
import shutil
import warnings

import pytest
import zarr

from engine.cli.commands import main
from engine.cube.markers import Markers
from engine.cube.provenance import describe_identity
from engine.cube.store import open_cube, quiet_zarr
from engine.runner.execute import run
from engine.sweep.config import load_sweep

from conftest import cubes_identical, sweep_file

SWEEP = """
    study = "pingpong"
    [axes]
    spin_ratio = {{ linspace = [0.5, 3.0, 6] }}
    drag = {{ linspace = [0.0, 0.2, 4] }}
    [run]
    shard_size = 8
    batch_size = 8
    executor = "inline"
    out = "{out}"
    """


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The cube, solved once: its path and its values."""
    folder = tmp_path_factory.mktemp("made")
    sweep = load_sweep(sweep_file(folder, SWEEP.format(out=folder / "cube.zarr")))
    run(sweep, progress=False)
    return sweep.out, open_cube(sweep.out).load()


@pytest.fixture
def cube(tmp_path, made):
    """A copy of the made cube, and a sweep file of its config writing there."""
    path = tmp_path / "cube.zarr"
    shutil.copytree(made[0], path)
    return path, sweep_file(tmp_path, SWEEP.format(out=path))


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    said = capsys.readouterr()
    assert "Traceback" not in said.out + said.err
    return code, said.out, said.err


def files(folder) -> dict:
    """Every file under `folder` with its bytes: what a refused command must leave as it was."""
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_sound_as_made(capsys, path, made):
    code, out, _ = cli(capsys, "verify", path)
    assert code == 0 and out.strip().endswith(": sound"), out
    assert cubes_identical(open_cube(path).load(), made[1])


def _garble(path):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


# ---- what verify finds, and what the next run repairs

def test_garbled_array_metadata_is_found_and_the_next_run_repairs_it(cube, made, capsys):
    """zarr reads an array's own zarr.json (xarray the consolidated copy): one garbled is damage."""
    path, sweep = cube
    own = path / "final_displacement" / "zarr.json"
    before = own.read_bytes()
    own.write_text('{"garbled')
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1, out
    assert "final_displacement/zarr.json (its metadata) cannot be read: a run repairs it" in out
    assert "1 problems; run the same command again to repair it" in out
    code, out, _ = cli(capsys, "status", path)  # status counts it as verify does
    assert code == 1 and "damaged final_displacement/zarr.json (its metadata) cannot be read: a run repairs it\n" in out
    assert out.endswith("\ndamaged: run the same command again to repair it\n"), out

    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert own.read_bytes() == before
    assert_sound_as_made(capsys, path, made)


def test_array_metadata_edited_is_found(cube, made, capsys):
    path, sweep = cube
    own = path / "num_steps" / "zarr.json"
    edited = json.loads(own.read_text()) | {"shape": [6, 5]}
    own.write_text(json.dumps(edited))
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1 and "num_steps/zarr.json (its metadata) differs from the cube's consolidated metadata" in out
    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert_sound_as_made(capsys, path, made)


@pytest.mark.parametrize("name", ["spin_ratio", "drag"])
def test_garbled_coordinate_chunk_is_found_and_the_next_run_repairs_it(cube, made, capsys, name):
    path, sweep = cube
    chunk = path / name / "c" / "0"
    before = chunk.read_bytes()
    _garble(chunk)
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1 and f"coordinate {name} " in out and "a run repairs it" in out, out

    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert chunk.read_bytes() == before
    assert_sound_as_made(capsys, path, made)


@pytest.mark.parametrize("name", ["drag", "num_steps"])
def test_an_array_lost_whole_is_found_and_the_next_run_repairs_it(cube, made, capsys, name):
    """Its folder gone (metadata and chunks): made again from the consolidated
    metadata, a coordinate's values written again, a variable's shards solved again."""
    path, sweep = cube
    shutil.rmtree(path / name)
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1 and f"{name}/zarr.json (its metadata) is missing: a run repairs it" in out, out
    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert_sound_as_made(capsys, path, made)


def test_coordinates_rewritten_with_wrong_values_are_found_and_repaired(cube, made, capsys):
    path, sweep = cube
    with quiet_zarr():
        array = zarr.open_array(path / "spin_ratio", mode="r+")
        array[...] = array[...] * 1.5  # a valid chunk, of values the config does not give
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1 and "coordinate spin_ratio differs from what was written" in out, out

    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert_sound_as_made(capsys, path, made)


def test_unreadable_coordinate_checksums_are_found_and_recorded_again(cube, made, capsys):
    path, sweep = cube
    recorded = Markers(path).coordinates_path
    before = recorded.read_bytes()
    recorded.write_text("{")
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1 and "coordinates' checksums (coordinates.json) cannot be read: a run repairs it" in out, out
    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert recorded.read_bytes() == before
    assert_sound_as_made(capsys, path, made)


def test_a_cube_made_before_coordinates_were_checksummed_verifies_as_before(cube, made, capsys):
    """No checksums recorded: the coordinates are not checked (said), never failed; a run leaves them be."""
    path, sweep = cube
    Markers(path).coordinates_path.unlink()
    _garble(path / "drag" / "c" / "0")  # unchecked, as before coordinates were checksummed
    code, out, _ = cli(capsys, "verify", path)
    assert code == 0 and out.strip().endswith("sound (coordinates not checksummed: made before they were, not "
                                              "checked)"), out
    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert not Markers(path).coordinates_path.exists()


def _set_attribute(path, name, value):
    from engine.cube.store import Cube

    Cube(path).set_attribute(name, value)


def test_stored_config_garbled_is_one_line_and_the_next_run_repairs_it(cube, made, capsys):
    path, sweep = cube
    _set_attribute(path, "config", "study = [not toml")
    for command in ("verify", "status"):  # (plot reads the data alone, not the config)
        before = files(path.parent)
        code, out, err = cli(capsys, command, path)
        assert code == 2 and not out and len(err.splitlines()) == 1, (command, out, err)
        assert f"{path}: its stored config (attribute config) cannot be read" in err
        assert "a run of the sweep file that made it repairs it" in err
        assert files(path.parent) == before

    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert_sound_as_made(capsys, path, made)


def test_stored_config_edited_is_found_and_the_next_run_repairs_it(cube, made, capsys):
    path, sweep = cube
    from engine.cube.store import Cube

    config = Cube(path).attrs["config"]
    _set_attribute(path, "config", config.replace("[0.0, 0.2, 4]", "[0.0, 0.3, 4]"))  # another config, valid
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1 and "its config_hash attribute" in out and "is not its stored config's hash" in out, out
    assert "(one of them edited): a run repairs it" in out

    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert_sound_as_made(capsys, path, made)


def test_config_hash_edited_is_found_and_the_next_run_repairs_it(cube, made, capsys):
    path, sweep = cube
    _set_attribute(path, "config_hash", "0" * 64)
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1 and "its config_hash attribute 000000000000 is not its stored config's hash" in out, out

    assert cli(capsys, "run", sweep, "--quiet")[0] == 0
    assert_sound_as_made(capsys, path, made)


@pytest.mark.parametrize("lost", ["garbled", "removed"])
def test_identity_lost_is_found_and_the_next_run_resumes_as_the_shards_were_solved(cube, made, capsys, lost):
    """The identity record (how the rest is to be solved) unreadable or gone:
    verify says so; the next run solves the pending shard as the others were
    (their done markers say how) and writes the record back."""
    path, sweep = cube
    markers = Markers(path)
    before = markers.identity_path.read_bytes()
    markers.identity_path.write_text("{") if lost == "garbled" else markers.identity_path.unlink()
    markers.drop_done("grid", 1)  # a shard to solve
    code, out, _ = cli(capsys, "verify", path)
    solved = describe_identity(json.loads(before))
    assert code == 1, out
    assert (f"its identity (_rollsweep/identity.json) is lost or cannot be read (its done shards were solved with "
            f"{solved}): a run repairs it") in out

    report = run(load_sweep(sweep), progress=False)
    assert report.state == "resumed" and report.shards_run == 1, report
    assert json.loads(markers.identity_path.read_bytes()) == json.loads(before)
    assert_sound_as_made(capsys, path, made)


def test_identity_edited_is_named_as_no_run_repairs_it(cube, capsys):
    """A record that says otherwise is what a run resumes by (refused where this
    run solves otherwise, tests/test_cube_identity.py): verify names it."""
    path, _ = cube
    markers = Markers(path)
    solved = describe_identity(markers.identity())
    edited = markers.identity() | {"device": "cpu (sse4.2)"}
    markers.identity_path.write_text(json.dumps(edited))
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1, out
    assert (f"its identity (_rollsweep/identity.json) says {describe_identity(edited)}, but its done shards were "
            f"solved with {solved} (edited: restore it): no run repairs it") in out


def test_what_no_run_repairs_verify_names_with_what_to_do(cube, made, capsys):
    path, sweep = cube
    with quiet_zarr(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Object at _rollsweep is not recognized")
        group = zarr.open_group(path, mode="r+")
        del group["num_events"]
        zarr.consolidate_metadata(path)
    code, out, _ = cli(capsys, "verify", path)
    assert code == 1, out
    assert ("variable num_events is missing: no run repairs it: solve the cube again with rollsweep run "
            "--overwrite") in out
    assert out.strip().endswith("1 of them no run repairs: solve it again with --overwrite"), out
    code, out, _ = cli(capsys, "status", path)
    assert code == 1 and out.endswith("\ndamaged: no run repairs it: solve the cube again with rollsweep run "
                                      "--overwrite\n"), out
    cli(capsys, "run", sweep, "--quiet")  # as said: a run does not repair it
    assert cli(capsys, "verify", path)[0] == 1

    assert cli(capsys, "run", sweep, "--quiet", "--overwrite")[0] == 0
    assert_sound_as_made(capsys, path, made)


# ---- a cube missing its markers or its metadata: one line from every command, nothing written

MISSING = {
    "markers": ("_rollsweep", "its markers' folder _rollsweep/ is missing"),
    "metadata": ("zarr.json", "its metadata zarr.json is missing"),
    "metadata-garbled": ("zarr.json", "its metadata zarr.json is not readable"),
}


@pytest.mark.parametrize("command", ["verify", "status", "plot", "run"])
@pytest.mark.parametrize("lost", sorted(MISSING))
def test_a_cube_missing_its_markers_or_metadata_is_refused_in_one_line(cube, capsys, command, lost):
    path, sweep = cube
    name, said = MISSING[lost]
    if lost.endswith("garbled"):
        _garble(path / name)
    else:
        shutil.rmtree(path / name) if (path / name).is_dir() else (path / name).unlink()
    before = files(path.parent)
    code, out, err = cli(capsys, command, sweep if command == "run" else path, *(["--quiet"] * (command == "run")))
    assert code == 2 and not out and len(err.splitlines()) == 1, (out, err)
    assert f"{path}: a damaged rollsweep cube: {said}" in err and "rollsweep run --overwrite" in err, err
    assert files(path.parent) == before and sorted(os.listdir(path.parent)) == sorted(p.name for p in [
        path, sweep])


def test_a_cube_missing_its_metadata_is_solved_afresh_by_overwrite(cube, made, capsys):
    path, sweep = cube
    (path / "zarr.json").unlink()
    assert cli(capsys, "run", sweep, "--quiet", "--overwrite")[0] == 0
    assert_sound_as_made(capsys, path, made)


# ---- a failed --overwrite: the right advice, nothing half-written

@pytest.mark.parametrize("fails", ["writing", "renaming"])
def test_overwrite_that_fails_making_its_cube_replaces_nothing_and_says_so(cube, made, capsys, monkeypatch, fails):
    """Its structure not written (a full disk), or not renamed into place once
    the old cube was moved aside: the old cube is where it was."""
    from engine.cube import store, structure

    path, sweep = cube
    rename = os.rename

    def full_disk(tmp, *args):
        raise OSError(28, "No space left on device", str(tmp))

    def failing_rename(source, target):
        if pathlib.Path(target) == path:  # the new cube into place (or the old one back: let through)
            if ".tmp-" in str(source) and not str(source).endswith("-old"):
                full_disk(source)
        return rename(source, target)

    if fails == "writing":
        monkeypatch.setattr(structure, "write", full_disk)
    else:
        monkeypatch.setattr(store.os, "rename", failing_rename)
    before = files(path.parent)
    code, out, err = cli(capsys, "run", sweep, "--quiet", "--overwrite")
    assert code == 2 and len(err.splitlines()) == 1 and "resume" not in err, err
    assert f"{path}: its new cube could not be made (No space left on device: " in err
    assert "nothing was replaced, the cube there is as it was" in err
    assert files(path.parent) == before
    assert_sound_as_made(capsys, path, made)


def test_overwrite_that_fails_solving_resumes_as_its_line_says(cube, made, capsys, monkeypatch):
    """The line says to run the same command again to resume: the same command,
    --overwrite and all, resumes the cube it made (not afresh again), to the
    cube an unbroken run makes."""
    from engine.cube.store import Cube

    path, sweep = cube
    real_write = Cube.write_regions
    writes = {"n": 0}

    def failing_write(cube, regions):
        writes["n"] += len(regions)
        if writes["n"] == 2:
            raise OSError(28, "No space left on device", str(cube.path))
        return real_write(cube, regions)

    monkeypatch.setattr(Cube, "write_regions", failing_write)
    code, out, err = cli(capsys, "run", sweep, "--quiet", "--overwrite")
    assert code == 2 and "shards already done are kept: run the same command again to resume" in err, err
    done = len(Markers(path).done("grid"))
    assert 1 <= done < 3

    monkeypatch.setattr(Cube, "write_regions", real_write)
    report = run(load_sweep(sweep), progress=False, overwrite=True)
    assert report.state == "resumed" and report.shards_run == 3 - done, report
    assert_sound_as_made(capsys, path, made)
    report = run(load_sweep(sweep), progress=False, overwrite=True)  # finished: --overwrite solves it all again
    assert report.state == "created" and report.shards_run == 3, report
    assert_sound_as_made(capsys, path, made)


# ---- a damaged kernel library is built again, never loaded

def _library(text):
    from engine.solve.kernel import host

    host._loaded.clear()  # as a new process: the library from the cache
    return host.shared_library(text, "test", (), "a test library")


@pytest.fixture
def kernel_cache(tmp_path, monkeypatch):
    from engine.solve.kernel import host

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    loaded = dict(host._loaded)
    yield host.cache_dir()
    host._loaded.clear()
    host._loaded.update(loaded)


@pytest.fixture
def loads(monkeypatch):
    """The SHA-256 of each library file as it is loaded."""
    from engine.solve.kernel import host

    loaded, real = [], host.ctypes.CDLL

    def load(path, *args, **kwargs):
        loaded.append(host._sha256(host.Path(path)))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(host.ctypes, "CDLL", load)
    return loaded


def _put_in_place_of(source, target):
    # A new file renamed over it (as a tampering process would): the loaded library's pages stay as they were.
    copy = target.with_name(target.name + ".new")
    shutil.copyfile(source, copy)
    os.replace(copy, target)


def test_a_tampered_kernel_library_is_built_again_not_loaded(kernel_cache, loads):
    from engine.solve.kernel import host

    text = "int answer(void) { return 42; }\n"
    key, lib = _library(text)
    kept = host._library_path(key)
    built = host._sha256(kept)
    assert lib.answer() == 42 and host._digest_path(kept).read_text() == built and loads == [built]
    other_key, _ = _library("int answer(void) { return 666; }\n")
    _put_in_place_of(host._library_path(other_key), kept)
    tampered = host._sha256(kept)

    _library(text)
    assert tampered not in loads[2:] and host._sha256(kept) == built == loads[-1]  # built again, then loaded
    assert host._digest_path(kept).read_text() == built


def test_a_kernel_library_without_its_digest_is_built_again(kernel_cache, loads):
    from engine.solve.kernel import host

    text = "int answer(void) { return 7; }\n"
    key, _ = _library(text)
    kept = host._library_path(key)
    built = host._sha256(kept)
    host._digest_path(kept).unlink()  # as a library built before digests were kept: not trusted
    _put_in_place_of(host._library_path(_library("int answer(void) { return 8; }\n")[0]), kept)
    _library(text)
    assert loads[-1] == built == host._sha256(kept) and host._digest_path(kept).read_text() == built


def test_stored_kernel_source_edited_is_generated_again(monkeypatch, tmp_path):
    """The generated C kept between processes (engine.solve.kernel.stored): text edited is not compiled."""
    from engine.solve.kernel import c_source, stored

    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path / "cache"))
    generated = []

    def generate(body, in_dtypes, out_dtypes):
        generated.append(1)
        return c_source.KernelSource.of("/* as generated */\n", in_dtypes, out_dtypes)

    class Body:
        input_dtypes, out_dtypes = ("float64",), ("float64",)

        def __call__(self, *args, **kwargs):
            raise AssertionError("generate is replaced")

    monkeypatch.setattr(c_source, "generate", generate)
    assert stored.kernel_source(Body(), "k").text == "/* as generated */\n" and len(generated) == 1
    assert stored.kernel_source(Body(), "k").text == "/* as generated */\n" and len(generated) == 1  # read back
    path = tmp_path / "cache" / "traced" / "k.c.json"
    path.write_text(path.read_text().replace("as generated", "injected"))
    assert stored.kernel_source(Body(), "k").text == "/* as generated */\n" and len(generated) == 2
