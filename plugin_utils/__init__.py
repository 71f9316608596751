"""Code that runs only on the control host: action plugins, lookups and scripts import it.

The project's module_utils/ are what modules ship to the nodes; the control host imports the same
files under the same names (ansible.module_utils.<name>), so an error class raised by one is the
class another catches.
"""

import os

import ansible.module_utils

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MODULE_UTILS = os.path.join(PROJECT_ROOT, "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)
