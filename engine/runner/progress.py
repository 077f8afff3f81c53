"""A run's progress bar: a widget in a notebook that can draw one, else a line of text.

tqdm.auto chooses the same way, but warns (`TqdmWarning: IProgress not found`)
as soon as it is imported in a notebook kernel without ipywidgets, whether or
not a bar is ever shown: every notebook that ran a sweep printed it, even with
`progress=False`. Here the choice is made when a bar is made, and a kernel
without ipywidgets gets the plain bar, silently.
"""

import importlib.util
import os
import sys

from tqdm import std


def progress_bar(*, disable: bool = False, **options) -> std.tqdm:
    """A tqdm bar (`options`: tqdm's). `disable`: a bar that shows nothing, of
    the plain class, which no notebook check touches."""
    if disable:
        return std.tqdm(disable=True, **options)
    return _bar_class()(**options)


def _bar_class() -> type:
    """tqdm.notebook's widget bar in a notebook kernel where ipywidgets is
    importable, else the plain terminal bar."""
    if not _in_notebook_kernel() or importlib.util.find_spec("ipywidgets") is None:
        return std.tqdm
    # Imported here: it imports ipywidgets, which a run outside a notebook never needs.
    from tqdm import notebook

    return notebook.tqdm if notebook.IProgress is not None else std.tqdm  # None: ipywidgets failed to import


def _in_notebook_kernel() -> bool:
    """Whether this process is a Jupyter kernel whose front end draws widgets
    (Jupyter, VS Code): its shell module is loaded. qtconsole and Spyder run the
    same kernel but draw no widgets (tqdm.autonotebook's test, without its warning)."""
    if "ipykernel.zmqshell" not in sys.modules:
        return False
    return not any(name == "QT_API" or name.startswith("SPYDER") for name in os.environ)
