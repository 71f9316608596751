"""Ansible module documentation only: verl_import runs on the control host, all of it in its action plugin
(action_plugins/verl_import.py), as Ansible's own debug and set_fact do; this file is what ansible-doc reads."""

DOCUMENTATION = r"""
---
module: verl_import
short_description: Read a verl launch script (never run) into a JobSpec file
description:
  - Reads a verl launch script as text, the way a POSIX shell splits it, takes its verl trainer command apart and
    writes the JobSpec it makes, C(<specs_dir>/<spec>.yaml). No line of the script runs and nothing is looked up in
    the environment of whoever imports it.
  - Says in RV(lines) where each word of the script went (a field, an override, the env, a comment in the spec, or left
    out, and why). import.yml runs it, then the head's preflight on the written spec.
  - A bad input fails the task with one line naming the file (and the line) and what is wrong.
  - Runs on the control host only (an action plugin); it has no connection and nothing runs on a managed host.
options:
  script:
    description:
      - The verl launch script, a path on the control host (C(~) expanded, relative to the current directory).
      - Needed; without it the task fails naming it (C(-e script=PATH) in import.yml).
    type: str
  spec:
    description:
      - The name of the spec to write, C(<specs_dir>/<spec>.yaml), 1-100 letters, digits or C(._-) starting with a
        letter or digit (no path separators).
      - Needed; without it the task fails naming it (C(-e spec=NAME) in import.yml).
    type: str
  command:
    description:
      - Which trainer command to import, by its number (1 is the script's first), for a script with several; a
        script with several and no O(command) fails listing them with their lines.
    type: raw
  force:
    description: Overwrite an existing spec file; without it an existing file fails the task before the script is read.
    type: bool
    default: false
  specs_dir:
    description: Where the spec file is written; default the project's C(jobspecs/).
    type: str
attributes:
  check_mode:
    description: Reads the script and says where each word would go; writes no file.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Import | Write jobspecs/deepseek.yaml from verl's PPO example
  verl_import:
    script: examples/ppo_trainer/run_deepseek7b_llm.sh
    spec: deepseek

- name: Import | The second trainer command of a script, over an existing spec
  verl_import:
    script: run.sh
    spec: rl
    command: 2
    force: true
"""

RETURN = r"""
path:
  description: The spec file written, or in check mode the one that would be.
  returned: success
  type: str
workload:
  description: The spec's workload, from the trainer and its estimator (sft, ppo or grpo).
  returned: success
  type: str
lines:
  description: One line for each word of the trainer command (where it went, or why it was left out), then what was
    written.
  returned: success
  type: list
  elements: str
"""
