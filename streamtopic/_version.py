"""The package's version, set once here (``pyproject.toml`` reads it without importing the
package; :mod:`streamtopic` and the records it writes take it from here)."""

__version__ = "0.1.0"
