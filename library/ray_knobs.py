"""Ansible module documentation only: ray_knobs runs on the control host, all of it in its action plugin
(action_plugins/ray_knobs.py), as Ansible's own debug and set_fact do; this file is what ansible-doc reads."""

DOCUMENTATION = r"""
---
module: ray_knobs
short_description: Read a play's -e knobs from the command line as data, each checked by its rule
description:
  - Ansible trusts a C(-e) value as a template, so no playbook names a knob in one. This reads the knobs a play takes
    from this run's command line as they were given (never templated), checks each against its one rule
    (plugin_utils/knobs.py), and returns them; the play uses the result, never the knob's own variable.
  - A knob not given takes the site's variable it stands for (the inventory's, a role's default) or its default.
  - A bad value fails the task with one line naming each bad knob and its rule, never the value (it may be a secret
    given by mistake). A C(-e) that sets the variable the task registers is refused.
  - Runs on the control host only (an action plugin); nothing runs on a managed host.
options:
  knobs:
    description:
      - The knobs to read, by name (a list), or a mapping of the result's key to each knob's name.
      - Each must be one of plugin_utils/knobs.py's knobs; another fails the task naming it.
    type: raw
    required: true
  required:
    description: Knobs that must be given with C(-e); one missing fails the task naming it.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description: Reads and checks the knobs as in a real run; it changes nothing in either.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Cordon | Read the -e knobs (data, never templated)
  ray_knobs:
    knobs: [host, state, why, force]
    required: [host]
  register: cordon_args

- name: Import | The knobs under keys of the play's choosing
  ray_knobs:
    knobs: {script_path: script, spec_name: spec}
  register: import_args
"""

RETURN = r"""
<key>:
  description: Each knob's checked value under its key (the knob's name, or the key O(knobs) maps to it).
  returned: success
  type: raw
"""
