"""A command imports what it uses: `import engine.cli.commands` (what every
`rollsweep` command, `--help` included, pays) and the commands that never
open a cube as a Dataset (`run` inline, `validate`, `studies`, `status`,
`submit`) load neither xarray, dask, distributed nor matplotlib: together
0.5-0.9 s of a warm run's 2.2 s, when `import engine` imported them all.

So the inline run writes its cube's structure with zarr directly
(engine.cube.structure.write); the store must read in xarray exactly as the
one `Dataset.to_zarr` wrote before (checked against xarray writing the same
structure here), and `ds.rollsweep` must still be there in a notebook however
it opens a cube. Each check runs in a fresh interpreter: this one has
imported everything long ago."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from engine.cube.store import Cube
from engine.sweep.config import load_sweep, parse_sweep

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
HEAVY = ("xarray", "dask", "distributed", "matplotlib")


def fresh(code: str, *args, tmp_path) -> str:
    """`code` run by a new interpreter (in tmp_path; its own compile cache there):
    its stdout, or the test fails with its stderr."""
    env = ENV | {"ROLLSWEEP_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_command_line_imports_none_of_them(tmp_path):
    out = fresh("""
        import sys
        import engine.cli.commands
        print(sorted(m for m in sys.modules if m.partition(".")[0] in sys.argv[1:]))
        """, *HEAVY, tmp_path=tmp_path)
    assert out.strip() == "[]"


def test_run_validate_studies_status_and_submit_import_none_of_them(small_sweep, tmp_path):
    """Each command in turn, then what the process holds; `studies` lists every
    study (each study's package loaded: the rebound study reads its measured
    table, an xarray Dataset, only when a sweep solves it)."""
    config = small_sweep()
    out = fresh("""
        import json, sys
        from engine.cli.commands import main
        config, cube, heavy = sys.argv[1], sys.argv[2], sys.argv[3:]
        loaded = {}
        for command in (["validate", config], ["run", config, "--quiet"], ["status", cube],
                        ["studies"], ["submit", config, "--dry-run"]):
            assert main(command) == 0, command
            loaded[command[0]] = sorted(m for m in sys.modules if m.partition(".")[0] in heavy)
        print(json.dumps(loaded))
        """, config, tmp_path / "cube.zarr", *HEAVY, tmp_path=tmp_path)
    loaded = json.loads(out.splitlines()[-1])
    assert loaded == dict.fromkeys(("validate", "run", "status", "studies", "submit"), []), loaded


def test_validate_of_a_hybrid_study_imports_no_solver(small_sweep, tmp_path):
    """`rollsweep validate` reads a sweep and plans it: diffrax (0.17 s of its
    0.65 s) is imported where a solve is traced, not by a HybridPoint study's
    module, the solver settings or the plan. On a GPU the plan checks that the
    study fuses, which traces its kernel body with the solver's constants: the
    first process takes them from diffrax, a later one reads them
    (engine.solve.solver_constants). So the second validate is the one checked."""
    config = small_sweep()
    for _ in range(2):
        out = fresh("""
            import sys
            from engine.cli.commands import main
            assert main(["validate", sys.argv[1]]) == 0
            print(sorted({m.partition(".")[0] for m in sys.modules} & {"diffrax", "optimistix", "lineax"}))
            """, config, tmp_path=tmp_path)
    assert out.splitlines()[-1] == "[]", out


def test_the_accessor_is_there_however_a_notebook_opens_a_cube(small_sweep, tmp_path):
    """`import engine` first, xarray after (the accessor registered by xarray's
    import), xarray first (registered by engine's), and engine.open_cube. (The
    cube is made here: only its opening is about a fresh interpreter.)"""
    from engine.cli.commands import main

    config = small_sweep()
    assert main(["run", str(config), "--quiet"]) == 0
    cube = tmp_path / "cube.zarr"
    ways = {
        "engine, then xarray": "import engine\nimport xarray as xr\nds = xr.open_zarr(cube)",
        "xarray, then engine": "import xarray as xr\nimport engine\nds = xr.open_zarr(cube)",
        "engine.open_cube": "import engine\nds = engine.open_cube(cube)",
        "engine.cube.store": "from engine.cube.store import open_cube\nds = open_cube(cube)",
    }
    for way, opening in ways.items():
        out = fresh(f"""
            import sys, warnings
            warnings.simplefilter("ignore")
            cube = sys.argv[1]
            {textwrap.indent(opening, " " * 12).strip()}
            print(ds.rollsweep.failures(), ds.rollsweep.study.name, int(ds.rollsweep.ok["status"].count()))
            """, cube, tmp_path=tmp_path)
        assert out.split() == ["{}", "pingpong", "23"], (way, out)


def test_the_hook_leaves_xarray_as_it_would_be(tmp_path):
    """The import hook that registers the accessor steps out once xarray is
    imported: not left among the finders, nor as xarray's loader."""
    out = fresh("""
        import sys
        import engine
        from engine.cube.accessor import _AfterXarray
        assert any(isinstance(f, _AfterXarray) for f in sys.meta_path)
        import xarray
        assert not any(isinstance(f, _AfterXarray) for f in sys.meta_path)
        assert type(xarray.__loader__).__name__ == "SourceFileLoader", xarray.__loader__
        assert xarray.__spec__.loader is xarray.__loader__
        import engine.cube.accessor as accessor
        accessor.register()  # again: nothing changes, nothing is said
        print(type(xarray.Dataset.__dict__["rollsweep"]).__name__)
        """, tmp_path=tmp_path)
    assert out.strip() == "_CachedAccessor"


def _demo(study: str, name: str) -> str:
    return (REPO / "studies" / study / "demo" / f"{name}.toml").read_text()


FLOAT32 = """
study = "pingpong"
[axes]
drag = { linspace = [0.0, 2.0, 5] }
spin_ratio = { linspace = [0.0, 4.0, 7] }
[solver]
dtype = "float32"
rtol = 1e-5
atol = 1e-10
[critical]
output = "final_displacement"
axis = "spin_ratio"
bracket = [1.0, 3.0]
xtol = 1e-3
[run]
shard_size = 8
"""


@pytest.mark.parametrize("study, text", [
    ("pingpong", _demo("pingpong", "pingpong_spin_ratio")),  # a critical value: a 0-d variable
    ("pingpong", FLOAT32),  # float32 outputs, two axes, a critical value per drag
    ("bicycle", _demo("bicycle", "bicycle_eigen_speed")),  # labels: a coordinate of strings
], ids=["critical", "float32", "labels"])
def test_the_structure_is_what_xarray_wrote(study, text, tmp_path):
    """The empty cube as engine.cube.structure.write makes it, against the same
    structure written by `Dataset.to_zarr` (placeholders never computed,
    chunks and compressors as encoding): every node's metadata, the
    coordinates' stored bytes, and the Dataset xarray reads back (attributes
    and encodings included)."""
    import dask.array as da
    import xarray as xr

    from engine.cube import structure

    sweep = parse_sweep(text, out=str(tmp_path / "ours.zarr"))
    arrays, attrs = structure.structure(sweep, "cpu:cpu")
    ours = Cube.create(sweep, tmp_path / "ours.zarr", devices="cpu:cpu").path
    # The creation time as ours has it: made a moment apart, the two could
    # straddle a second (seen on a loaded CI machine: 19:21:04 against :05).
    attrs["created"] = json.loads((ours / "zarr.json").read_text())["attributes"]["created"]

    data, coords, encoding = {}, {}, {}
    for name, v in arrays.items():
        if v.values is not None:
            coords[name] = (v.dims, v.values, v.attrs)
            continue
        fill = np.nan if v.dtype.startswith("float") else 0
        data[name] = (v.dims, da.full(v.shape, fill, dtype=v.dtype, chunks=v.shape or -1), v.attrs)
        encoding[name] = {"chunks": v.chunks, "compressors": (structure.compressor(),)}
        if not v.dtype.startswith("float"):
            encoding[name]["_FillValue"] = None
    theirs = tmp_path / "theirs.zarr"
    xr.Dataset(data, coords=coords, attrs=attrs).to_zarr(theirs, mode="w-", compute=False, zarr_format=3,
                                                           consolidated=True, encoding=encoding)

    files = sorted(p.relative_to(theirs) for p in theirs.rglob("*") if p.is_file())
    zarrs = (p.relative_to(ours) for p in ours.rglob("*") if p.is_file())
    assert files == sorted(p for p in zarrs if p.parts[0] != "_rollsweep")  # (the markers: the cube's own)
    for file in files:
        if file.name == "zarr.json":
            assert json.loads((ours / file).read_text()) == json.loads((theirs / file).read_text()), file
        else:  # a coordinate's chunk
            assert (ours / file).read_bytes() == (theirs / file).read_bytes(), file
    a, b = (xr.open_zarr(path, consolidated=True) for path in (ours, theirs))
    assert a.identical(b)
    assert list(a.variables) == list(b.variables)
    for name in a.variables:  # (as text: a NaN fill value is no NaN's equal)
        assert repr(a[name].encoding) == repr(b[name].encoding), name


def test_a_run_reads_back_through_xarray(small_sweep):
    """The inline run's cube (structure by zarr, regions by zarr) as a notebook
    reads it: coordinates, attributes, values, no pending point."""
    import xarray as xr

    from engine.runner.execute import run

    sweep = load_sweep(small_sweep(extra='[critical]\noutput = "final_displacement"\naxis = "spin_ratio"\n'
                                         "bracket = [1.0, 3.0]\nxtol = 1e-12"))
    run(sweep, progress=False)
    ds = xr.open_zarr(sweep.out, consolidated=True)
    np.testing.assert_array_equal(ds["spin_ratio"].values, np.linspace(0.0, 3.0, 23))
    assert "units" not in ds["spin_ratio"].attrs and ds.attrs["study"] == "pingpong"  # dimensionless
    assert (ds["status"].values == 1).all() and np.isfinite(ds["final_displacement"].values).all()
    assert 1.77 < float(ds["critical_spin_ratio"]) < 1.78
    assert ds["status"].encoding["chunks"] == (5,) and ds["final_displacement"].encoding["chunks"] == (5,)
