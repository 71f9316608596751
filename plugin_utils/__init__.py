"""Code that runs only on the control host (never shipped to a node), and the project's one import bootstrap.

One import form. The project's helpers live in module_utils/, which Ansible ships to the nodes with
each module; every file imports them as ``from ansible.module_utils import X`` (modules must, for
Ansible to find and ship them). So each helper is one module under one name everywhere, and an error
class raised by one file is the class another catches.

The bootstrap. Ansible loads a plugin from its file, with no package around it, and a script is run
as a file too, so control-host code reaches the helpers through these two lines, verbatim, at the top
of every plugin, script and lab tool in a top-level folder (action_plugins/, filter_plugins/,
lookup_plugins/, inventory_plugins/, scripts/, lab/):

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
    import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

(``from plugin_utils import ...`` as the second line does the same.) The first line puts the project
root on sys.path so this package imports; importing it appends module_utils/ to
``ansible.module_utils.__path__``, so ``from ansible.module_utils import X`` after it finds the
project's helpers. That needs Ansible in the Python that runs the file: Ansible's own for plugins, the
project's venv (.venv/bin/python) for scripts and lab tools. scripts/slurm_batch.py, which Slurm runs
from a copy in its spool, takes the root from the submit directory instead (see its main()).
Tests get the same from tests/conftest.py, the one shim for tests.
"""

import os

import ansible.module_utils

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MODULE_UTILS = os.path.join(PROJECT_ROOT, "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)
