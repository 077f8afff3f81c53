"""JAX's plug-in scan, made short (engine._imports.shorten_plugin_scan): JAX
reads every installed distribution's metadata at its import, looking for a
ROCm plug-in (0.8 s of a warm run on a GPU image of 239 distributions). The
scan must be handed exactly the distributions that could be such a plug-in,
every other caller must see every distribution, and the original function
must be back once JAX is imported. Each check that imports JAX runs in a
fresh interpreter: this one imported it long ago."""

import importlib.metadata as metadata
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from engine import _imports

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))


def _site_with(tmp_path, *names):
    """A folder of installed distributions (dist-info folders) named `names`."""
    for name in names:
        info = tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    return tmp_path


@pytest.fixture
def shortened(monkeypatch):
    """shorten_plugin_scan installed, and importlib.metadata as it was after the test."""
    monkeypatch.setattr(metadata, "distributions", metadata.distributions)
    _imports.shorten_plugin_scan()
    return metadata.distributions


def _as_the_scan(function, **kwargs):
    """`function(**kwargs)`'s names, called from a module named as JAX's scanning one."""
    scope = {"__name__": _imports._PLUGIN_SCAN, "function": function, "kwargs": kwargs}
    exec("names = sorted(d.metadata['Name'] for d in function(**kwargs))", scope)
    return scope["names"]


def test_the_scan_gets_only_the_plugins_and_the_original_comes_back(shortened, tmp_path):
    site = _site_with(tmp_path, "jax-rocm7-plugin", "jax_rocm60_plugin", "numpy-like", "jaxlib-like", "rocm-tools")
    original = shortened.__wrapped__
    assert _as_the_scan(shortened, path=[str(site)]) == ["jax-rocm7-plugin", "jax_rocm60_plugin"]
    assert metadata.distributions is original  # once: JAX scans at its import only


def test_any_other_caller_gets_every_distribution(shortened, tmp_path):
    site = _site_with(tmp_path, "jax-rocm7-plugin", "numpy-like", "rocm-tools")
    every = sorted(d.metadata["Name"] for d in shortened(path=[str(site)]))
    assert every == ["jax-rocm7-plugin", "numpy-like", "rocm-tools"]
    assert metadata.distributions is shortened  # still waiting for the scan
    assert len(metadata.entry_points().select(group="console_scripts")) >= 1  # importlib's own callers too


def test_a_distribution_whose_folder_says_no_name_is_kept(shortened, tmp_path):
    """An egg-link or a folder without a name in it: its metadata decides, as before."""
    odd = metadata.PathDistribution(tmp_path)
    (tmp_path / "METADATA").write_text("Metadata-Version: 2.1\nName: jax-rocm7-plugin\nVersion: 1.0\n")
    assert _imports._may_be_rocm_plugin(odd)


def test_jax_imported_through_the_engine_finds_what_it_found_and_puts_it_back(tmp_path):
    code = """
        import importlib.metadata as metadata, sys
        original = metadata.distributions
        from engine._imports import import_paused
        import_paused("jax")
        from jax._src.numpy import array_constructors
        print(metadata.distributions is original, array_constructors.rocm_plugin_extension)
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=ENV, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "None"]  # no ROCm plug-in in this environment, as JAX finds alone
