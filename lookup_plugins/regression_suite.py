"""Lookup: the entries of a regression suite (suites/<name>.yaml), read and checked on the control host."""

DOCUMENTATION = r"""
name: regression_suite
short_description: The checked entries of suites/<name>.yaml
description:
  - Returns the suite's entries, each C({name, spec, overrides, gates}); a bad suite fails with one line naming it.
  - Secret env values in overrides are redacted (the names ray_job hides, C(ray_config.secret_env_names) (the
    default secret names unless it lists its own) and the inventory's C(jobspec_secret_env_names)), since
    Ansible shows and keeps variables. M(ray_job) reads an entry's real values itself (its
    O(ray_job#module:suite) and O(ray_job#module:entry) options).
options:
  _terms:
    description: The suite's name.
    required: true
  suites_dir:
    description: Where suite files are; default the project's C(suites/).
    type: path
"""

EXAMPLES = r"""
- name: Regression | Load the suite
  ansible.builtin.set_fact:
    regression_entries: "{{ query('regression_suite', 'lab') }}"

- name: Regression | Each entry's JobSpec, from a suites folder of one's own
  ansible.builtin.debug:
    msg: "{{ item.name }}: {{ item.spec }}"
  loop: "{{ query('regression_suite', 'nightly', suites_dir='/srv/suites') }}"
"""

RETURN = r"""
_raw:
  description:
    - The suite's entries, each C({name, spec, overrides, gates}), secret env values in overrides redacted.
  type: list
  elements: dict
"""

import os
import sys

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT, jobspec_input

from ansible.module_utils.base import redaction  # isort: skip


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        suites_dir = self.get_option("suites_dir") or os.path.join(PROJECT_ROOT, "suites")
        try:
            # One list per suite name: a single term gives its entries as the lookup's list.
            entries = [entry for name in terms for entry in jobspec_input.load_suite(str(name), suites_dir)]
        except jobspec_input.SuiteError as exc:
            raise AnsibleLookupError(str(exc)) from None
        # Variables reach a lookup templated already: the names ray_job hides, by the same rule.
        ray_config = (variables or {}).get("ray_config")
        names = redaction.secret_names(ray_config.get("secret_env_names") if isinstance(ray_config, dict) else None,
                                       (variables or {}).get("jobspec_secret_env_names") or [])
        return jobspec_input.shown_entries(entries, names)
