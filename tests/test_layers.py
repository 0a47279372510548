"""The layers contract of the package's imports (scripts/check_layers.py, run by .ci/run)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "scripts" /
                                                  "check_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_layers", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_the_package_keeps_its_layers() -> None:
    assert _checker().check() == []


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package's sources with ``line`` added at the top of ``module``."""
    root = tmp_path / "streamtopic"
    shutil.copytree(ROOT / "streamtopic", root,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "data"))
    path = root / f"{module}.py"
    path.write_text(line + "\n" + path.read_text())
    return root


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    root = _copy_with(tmp_path, "store", "from .model import AnchorTopicModel")
    problems = _checker().check(root)
    assert "streamtopic/store.py:1: upward import of model by store" in problems
    assert any(p.startswith("import cycle:") for p in problems)


def test_a_deferred_import_counts_too(tmp_path: Path) -> None:
    root = _copy_with(tmp_path, "passes", "def f() -> None:\n    from .cli import main\n")
    assert "streamtopic/passes.py:2: upward import of cli by passes" in _checker().check(root)


def test_a_deferred_import_needs_a_reason(tmp_path: Path) -> None:
    root = _copy_with(tmp_path, "passes", "def f() -> None:\n    from .store import DENSE\n")
    assert ("streamtopic/passes.py:2: store imported inside a function, with no reason in "
            "DEFERRED") in _checker().check(root)


def test_private_names_of_other_modules_break_it(tmp_path: Path) -> None:
    root = _copy_with(tmp_path, "model", "from .store import _head_of\n"
                                         "def f(s) -> None:\n    s._head()\n")
    problems = _checker().check(root)
    assert "streamtopic/model.py:1: private name store._head_of imported by model" in problems
    assert "streamtopic/model.py:3: private name s._head of store" in problems
