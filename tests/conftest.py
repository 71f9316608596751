"""Make the project's Python importable in tests the way Ansible loads it.

module_utils/ files are imported by modules as ansible.module_utils.<name>, and by
filters and CLIs as plain modules; both names must reach the same files here.
"""

import os
import sys

import ansible.module_utils

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The control host's own code (plugin_utils) imports as a package from the project root.
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
for sub in ("module_utils", "library", "filter_plugins", "scripts"):
    path = os.path.join(ROOT, sub)
    if path not in sys.path:
        sys.path.insert(0, path)
ansible.module_utils.__path__.append(os.path.join(ROOT, "module_utils"))
