"""The run's progress bar: a widget where a notebook draws one, the plain bar
elsewhere, and no warning in a notebook kernel without ipywidgets."""

import subprocess
import sys
import textwrap
import types
import warnings

import pytest
import tqdm.notebook
import tqdm.std

from engine.runner import progress
from engine.runner.progress import progress_bar

# What a notebook kernel has loaded, for tqdm's checks (tqdm.autonotebook and
# ours): its shell module, and IPython's get_ipython giving the kernel's shell.
FAKE_KERNEL = """
import sys, types
shell = type("ZMQInteractiveShell", (), {})()
sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")
sys.modules["IPython"] = types.SimpleNamespace(get_ipython=lambda: shell)
"""


@pytest.fixture
def kernel(monkeypatch):
    """This process as a notebook kernel (the shell module loaded)."""
    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", types.ModuleType("ipykernel.zmqshell"))
    for name in ("QT_API", "SPYDER_ARGS"):
        monkeypatch.delenv(name, raising=False)


def _ipywidgets(monkeypatch, importable: bool):
    find_spec = progress.importlib.util.find_spec
    monkeypatch.setattr(progress.importlib.util, "find_spec",
                        lambda name, *a: (object() if importable else None) if name == "ipywidgets"
                        else find_spec(name, *a))


def test_a_kernel_without_ipywidgets_gets_the_plain_bar_and_no_warning():
    """In a subprocess: tqdm.auto warns once, when first imported. The same fake
    kernel makes tqdm.auto warn (the notebooks' `TqdmWarning: IProgress not
    found`, today's bar) and our bar, made and closed, warn nothing."""
    code = FAKE_KERNEL + textwrap.dedent("""
        import importlib.util, warnings
        assert importlib.util.find_spec("ipywidgets") is None, "this test needs an environment without ipywidgets"
        with warnings.catch_warnings(record=True) as ours:
            warnings.simplefilter("always")
            from engine.runner.progress import progress_bar
            import tqdm.std
            for disable in (True, False):
                with progress_bar(total=3, disable=disable) as bar:
                    assert type(bar) is tqdm.std.tqdm
                    bar.update(3)
        with warnings.catch_warnings(record=True) as auto:
            warnings.simplefilter("always")
            import tqdm.auto
        print([str(w.message) for w in ours], [str(w.message) for w in auto])
        assert not ours and any("IProgress not found" in str(w.message) for w in auto)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_kernel_with_ipywidgets_gets_the_notebook_bar(kernel, monkeypatch):
    _ipywidgets(monkeypatch, importable=True)
    monkeypatch.setattr(tqdm.notebook, "IProgress", object)  # as where ipywidgets imports
    assert progress._bar_class() is tqdm.notebook.tqdm


def test_a_broken_ipywidgets_gets_the_plain_bar(kernel, monkeypatch):
    _ipywidgets(monkeypatch, importable=True)
    monkeypatch.setattr(tqdm.notebook, "IProgress", None)  # tqdm.notebook's import of it failed
    assert progress._bar_class() is tqdm.std.tqdm


def test_a_terminal_gets_the_plain_bar_even_with_ipywidgets(monkeypatch):
    monkeypatch.delitem(sys.modules, "ipykernel.zmqshell", raising=False)
    _ipywidgets(monkeypatch, importable=True)
    assert progress._bar_class() is tqdm.std.tqdm


def test_qtconsole_gets_the_plain_bar(kernel, monkeypatch):
    _ipywidgets(monkeypatch, importable=True)
    monkeypatch.setenv("QT_API", "pyqt5")
    assert progress._bar_class() is tqdm.std.tqdm


def test_a_disabled_bar_shows_nothing_and_warns_nothing(kernel, monkeypatch, capsys):
    _ipywidgets(monkeypatch, importable=True)  # a notebook bar would be chosen, were it shown
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with progress_bar(total=5, disable=True, desc="quiet") as bar:
            bar.update(5)
    assert type(bar) is tqdm.std.tqdm and bar.disable
    assert capsys.readouterr() == ("", "")


def test_a_shown_bar_carries_the_runs_options(capsys):
    with progress_bar(total=4, unit="pt", desc="toy shards 0/2", dynamic_ncols=True) as bar:
        bar.update(4)
    assert "toy shards 0/2" in capsys.readouterr().err
