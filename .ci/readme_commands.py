"""Print the README's quick-start commands, one a line: the lines between its ci:quickstart markers.

.ci/run runs exactly these, so the README and CI cannot drift apart. Fails unless there are two.
"""

import sys
from pathlib import Path

BEGIN, END = "<!-- ci:quickstart:begin -->", "<!-- ci:quickstart:end -->"

text = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text(encoding="utf-8")
if text.count(BEGIN) != 1 or text.count(END) != 1:
    sys.exit(f"README.md must hold exactly one {BEGIN} ... {END} block")
block = text.split(BEGIN, 1)[1].split(END, 1)[0]
commands = [line for line in block.splitlines() if line.strip() and not line.startswith("```")]
if len(commands) != 2:
    sys.exit(f"README.md's quick start must be two commands (install and run; test), found {len(commands)}")
print("\n".join(commands))
