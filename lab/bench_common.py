"""What the lab's benchmarks share: the control host's venv and how a playbook is timed (a failure ends the run with
the end of its output)."""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT as ROOT

BIN = os.path.join(ROOT, ".venv", "bin")
ENV = dict(os.environ, ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))


def timed(argv, what):
    """(seconds, stdout) of a command run from the project root; a failure ends the benchmark, saying what failed."""
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{what} failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def playbook(*args):
    """(seconds, stdout) of ansible-playbook with args."""
    return timed([os.path.join(BIN, "ansible-playbook"), *args], "ansible-playbook " + " ".join(args))
