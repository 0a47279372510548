"""Sphinx configuration of streamtopic's documentation site.

Built in CI with warnings as errors (``python -m sphinx -W -b html docs OUT``); its examples
run as doctests (``-b doctest``). The API reference (``api.rst``) is generated from the
docstrings, one page per public module listing its ``__all__``; :func:`check_api_coverage`
fails the build when a name of ``streamtopic.__all__`` or of a public module's ``__all__``
has no entry. The worked examples under ``examples/`` run during the build (sphinx-gallery).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import streamtopic  # noqa: E402

# numpydoc drops a docstring section it does not know (after a Python warning, not a
# Sphinx one): make it an error, so that no docstring loses text in the reference
warnings.filterwarnings("error", message="Unknown section", category=UserWarning)

project = "streamtopic"
author = "the streamtopic developers"
copyright = "the streamtopic developers, BSD-3-Clause"  # noqa: A001
version = release = streamtopic.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "examples", "generated/*.examples", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip", "auto_examples/*.json",
                    "auto_examples/*.md5", "auto_examples/*.codeobj.json"]
templates_path = ["_templates"]
root_doc = "index"

# autodoc / autosummary: one page per public module, its __all__ in tables, a page per name
autosummary_generate = True
autosummary_ignore_module_all = False
autosummary_imported_members = False
autodoc_default_options = {"members": True, "inherited-members": False, "show-inheritance": True}
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()

myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # pages moved from the README keep their heading levels

intersphinx_mapping = {}  # offline: no inventories are fetched

html_theme = "pydata_sphinx_theme"
html_title = f"streamtopic {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
}
html_show_sourcelink = False

# the worked examples: run at every build, their output and figures kept in the pages
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "plot_gallery": "True",
    "within_subsection_order": "FileNameSortKey",
    "capture_repr": ("_repr_html_", "__repr__"),
}

doctest_global_setup = """
import os
os.environ.pop("STREAMTOPIC_PROGRESS", None)
"""


def public_modules() -> list[str]:
    """streamtopic's public modules: the package and every module whose name has no
    leading underscore (``__main__`` excepted)."""
    names = ["streamtopic"]
    for info in pkgutil.iter_modules(streamtopic.__path__):
        if not info.name.startswith("_"):
            names.append(f"streamtopic.{info.name}")
    return sorted(names)


def public_names() -> dict[str, list[str]]:
    """Each public module's ``__all__``."""
    return {m: list(getattr(importlib.import_module(m), "__all__", [])) for m in public_modules()}


def check_api_coverage(app, env) -> None:  # noqa: ANN001
    """Warn (an error under ``-W``) for every public name without an entry in the API
    reference: ``module.name`` for each public module's ``__all__``; for the package's own
    ``__all__``, the name's entry in the module that defines it."""
    from sphinx.util import logging

    logger = logging.getLogger("streamtopic.api")
    documented = set(env.domains["py"].objects)
    for module, names in public_names().items():
        if not names and module != "streamtopic":
            logger.warning("%s: a public module without __all__", module)
        for name in names:
            targets = ([f"{module}.{name}"] if module != "streamtopic"
                       else [f"streamtopic.{name}", *homes(name)])
            if not documented.intersection(targets):
                logger.warning("API reference: %s.%s has no entry (%s)", module, name,
                               " or ".join(targets))


def homes(name: str) -> list[str]:
    """The entries a name of ``streamtopic.__all__`` may have: ``module.name`` for each
    public module whose ``__all__`` holds the same object."""
    obj = getattr(streamtopic, name)
    return [f"{m}.{name}" for m, names in public_names().items()
            if m != "streamtopic" and name in names
            and getattr(importlib.import_module(m), name) is obj]


def setup(app) -> dict[str, bool]:  # noqa: ANN001
    app.connect("env-check-consistency", check_api_coverage)
    os.environ.pop("STREAMTOPIC_PROGRESS", None)
    return {"parallel_read_safe": True}
