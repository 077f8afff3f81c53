"""The engine's version (pyproject.toml's), recorded in every cube it writes."""

__version__ = "0.1.0"
