"""The tests' one shim: the project's Python importable the way Ansible and the bootstrap load it.

Tests import the project's helpers as every other file does, `from ansible.module_utils import X`
(plugin_utils/__init__.py, the bootstrap, makes module_utils/ reachable there); module_utils/ itself
is never on sys.path, so no helper loads under a second name. By name, from their folders: modules
(library/, to call main()), filters, lookups (lookup_plugins/), scripts and the lab's tools (lab/: lab,
lab_slurm, verl_cpu, and lab/assets/).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("library", "filter_plugins", "lookup_plugins", "scripts", "lab", "lab/assets")
for path in (ROOT, *(os.path.join(ROOT, sub) for sub in FOLDERS)):
    if path not in sys.path:
        sys.path.insert(0, path)

import plugin_utils  # noqa: F401 - the bootstrap: ansible.module_utils.<helper> from here on
