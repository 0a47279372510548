"""The newcomer's path: the README's two commands (read as .ci/run reads them), the test
command's installation of Chromium on a machine without it (its logic, with stand-ins for
apt-get and python), the README as a front page whose links resolve, and an API reference
that lists every public module (the documentation build itself fails when a public name has
no entry: docs/conf.py)."""

from __future__ import annotations

import os
import pkgutil
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import streamtopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from readme_commands import commands  # noqa: E402

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_a_front_page_with_two_commands():
    assert len(README.splitlines()) < 200
    first, second = commands(README)
    assert first.startswith("pip install . && streamtopic fit \"$(streamtopic demo-path)\"")
    assert second == "scripts/test"
    assert os.access(ROOT / "scripts" / "test", os.X_OK)


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert len(links) > 10
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link


def test_api_reference_lists_every_public_module():
    api = (ROOT / "docs" / "api.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^   (streamtopic\.\w+)$", api, re.M))
    public = {f"streamtopic.{m.name}" for m in pkgutil.iter_modules(streamtopic.__path__)
              if not m.name.startswith("_")}
    assert listed == public
    for name in streamtopic.__all__:  # the package's names, linked to their modules' pages
        assert re.search(rf"^   ~streamtopic\.\w+\.{name}$", api, re.M), name


# ----------------------------------------------------------------------------- scripts/test


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run_test_script(tmp_path: Path, *, root: bool, chromium: bool) -> tuple[int, str, str]:
    """scripts/test with stand-ins: ``python`` and ``apt-get`` log their arguments (the
    stand-in apt-get "installs" the browser by creating it), ``id -u`` says root or not, and
    ``sudo`` refuses. Returns the exit code, the log and standard error."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    browser = tmp_path / "chromium"
    if chromium:
        _stub(browser, "")
    _stub(bin_dir / "python", f'echo "python $*" >> {log}\n')
    _stub(bin_dir / "apt-get", f'echo "apt-get $*" >> {log}\n'
                               f'case "$*" in *install*) printf "#!/bin/sh\\n" > {browser}; '
                               f'chmod +x {browser};; esac\n')
    _stub(bin_dir / "id", f'echo {0 if root else 1000}\n')
    _stub(bin_dir / "sudo", "exit 1\n")
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin", PYTHON="python",
               STREAMTOPIC_CHROMIUM=str(browser))
    res = subprocess.run([str(ROOT / "scripts" / "test"), "-x", "tests"], env=env,
                         capture_output=True, text=True, timeout=60)
    return res.returncode, log.read_text() if log.exists() else "", res.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script")
def test_test_command_installs_chromium_when_missing(tmp_path):
    code, log, err = _run_test_script(tmp_path, root=True, chromium=False)
    assert code == 0, err
    assert log.splitlines() == [
        'python -m pip install -q -e .[dev]',
        "apt-get update -qq",
        "apt-get install -y -qq chromium",
        "python -m pytest -x tests",
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script")
def test_test_command_leaves_an_installed_chromium_and_explains_without_root(tmp_path):
    (tmp_path / "a").mkdir()
    code, log, _ = _run_test_script(tmp_path / "a", root=True, chromium=True)
    assert code == 0 and "apt-get" not in log and log.endswith("python -m pytest -x tests\n")
    (tmp_path / "b").mkdir()
    code, log, err = _run_test_script(tmp_path / "b", root=False, chromium=False)
    assert code == 1 and "apt-get" not in log and "pytest" not in log
    assert "apt-get install -y chromium" in err
