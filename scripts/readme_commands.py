"""Print the README's set-up commands, one per line, exactly as printed: the command lines
of the first fenced ``bash`` block under the heading "Set-up: two commands" (comments and
blank lines left out). ``.ci/run`` runs them in a fresh virtual environment, so the README
cannot drift from what CI checks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

HEADING = "## Set-up: two commands"


def commands(readme: str) -> list[str]:
    """The command lines of the set-up block of ``readme`` (its text)."""
    start = readme.index(HEADING)
    block = re.search(r"```bash\n(.*?)```", readme[start:], re.S)
    if block is None:
        raise ValueError(f"no ```bash block under {HEADING!r}")
    return [line for line in block.group(1).splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "README.md"
    print("\n".join(commands(path.read_text(encoding="utf-8"))))
