#!/usr/bin/python
"""Ansible module: one of the project's daemons (the GCS store's Redis, TensorBoard, Prometheus) in its state, in one
call; the work is in module_utils/daemons/ctl.py."""

DOCUMENTATION = r"""
---
module: ray_daemon
short_description: Keep one of the project's daemons running with its files, in one call
description:
  - Makes O(directories) and writes O(files) (each checked by its O(files[].validate) command before it replaces the
    one in use), then keeps the daemon running with O(argv), as O(user).
  - Where systemd runs (V(/run/systemd/system) exists) it is a unit in V(/etc/systemd/system), enabled; elsewhere (the
    lab) Debian's C(start-stop-daemon) starts it detached with a pid file in O(run_dir), its output to O(log), and
    records its command beside the pid file.
  - It is restarted when its command, its unit or one of O(files) changed, or O(restart) is true; left alone when
    nothing did. With O(listen) it returns once the daemon accepts connections there, or fails naming its log.
  - Refuses a directory or file of the daemon's that is a symbolic link. A file's content is never shown.
options:
  name:
    description: The unit's name (V(<name>.service)) and its pid file's (V(<run_dir>/<name>.pid)).
    type: str
    required: true
  state:
    description: V(started) keeps it running as described; V(stopped) stops it (its files stay).
    type: str
    choices: [started, stopped]
    default: started
  description:
    description: The unit's description.
    type: str
    default: ""
  argv:
    description:
      - The command, the executable's absolute path first, one word per argument (no shell).
      - Each word holds only letters, digits and C(._/:=,+@^-).
    type: list
    elements: str
    default: []
  user:
    description: The user it runs as.
    type: str
    default: nobody
  group:
    description: Its group; empty, the user's own.
    type: str
    default: ""
  notify:
    description: The daemon tells systemd when it is ready (a unit of V(Type=notify), as Redis with
      C(supervised systemd)).
    type: bool
    default: false
  requires:
    description: A path that must exist (its executable); when it does not, O(package) is installed, or the call fails.
    type: str
    default: ""
  package:
    description: Debian's package that brings O(requires), installed (without recommends) only when O(requires) is
      missing.
    type: str
    default: ""
  directories:
    description: Directories to make (parents with mode 0755) or fix, each before O(files).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Its absolute path.
        type: str
        required: true
      owner:
        description: Its owner.
        type: str
        default: root
      group:
        description: Its group; empty, the owner's own.
        type: str
        default: ""
      mode:
        description: Its mode, in octal.
        type: str
        default: "0755"
  files:
    description: Files to keep with this content, in order (a file a later one refers to comes first).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Its absolute path; its directory must exist (see O(directories)).
        type: str
        required: true
      content:
        description: Its content (never shown, since it may hold a password).
        type: str
        required: true
      owner:
        description: Its owner.
        type: str
        default: root
      group:
        description: Its group; empty, the owner's own.
        type: str
        default: ""
      mode:
        description: Its mode, in octal.
        type: str
        default: "0644"
      validate:
        description: A command (one word per argument) that checks the new file, whose path replaces the word C(%s).
        type: list
        elements: str
        default: []
  restart:
    description: Restart it even when nothing here changed (its caller's configuration did).
    type: bool
    default: false
  listen:
    description: C({host, port}) it accepts connections on once running.
    type: dict
    default: {}
  wait_s:
    description: How long to wait for O(listen).
    type: int
    default: 60
  log:
    description: Without systemd, where its output goes (with systemd, the journal).
    type: str
    default: /run/ray-verl/daemon.log
  run_dir:
    description: Without systemd, where its pid file and recorded command live (per host, gone at reboot).
    type: str
    default: /run/ray-verl
  conflicts:
    description: With systemd, units that would take its place or its port, stopped and masked.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
author: ray-verl maintainers
"""

EXAMPLES = r"""
- name: Ray Prometheus | Run Prometheus with its rules and configuration
  ray_daemon:
    name: ray-verl-prometheus
    argv: [/usr/bin/prometheus, --config.file=/etc/ray-verl/prometheus/prometheus.yml]
    user: prometheus
    requires: /usr/bin/promtool
    package: prometheus
    directories:
      - {path: /var/lib/ray-verl-prometheus, owner: prometheus, mode: "0750"}
    files:
      - path: /etc/ray-verl/prometheus/prometheus.yml
        content: "{{ config | to_nice_yaml }}"
        validate: [/usr/bin/promtool, check, config, "%s"]
    listen: {host: 198.18.0.10, port: 9090}
"""

RETURN = r"""
action:
  description: V(started), V(restarted) or V(stopped) when it was (or, in check mode, would be); null otherwise.
  returned: always
  type: str
written:
  description: The paths of O(files) written (or that would be).
  returned: always
  type: list
  elements: str
systemd:
  description: Whether it runs as a systemd unit here.
  returned: always
  type: bool
installed:
  description: The package installed because O(requires) was missing (or would be, in check mode); null otherwise.
  returned: always
  type: str
opened:
  description:
    - Parent folders of O(directories) and O(files) that O(user) could not enter, given search permission for others
      (or that would be, in check mode). Only root-owned folders outside the system's own (V(/etc), V(/var/lib), ...)
      are opened; any other that keeps O(user) out fails the call, naming it.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.daemons import ctl as daemon_ctl

_PATH_ENTRY = {"path": {"type": "str", "required": True}, "owner": {"type": "str", "default": "root"},
               "group": {"type": "str", "default": ""}}


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
            "description": {"type": "str", "default": ""},
            "argv": {"type": "list", "elements": "str", "default": []},
            "user": {"type": "str", "default": "nobody"},
            "group": {"type": "str", "default": ""},
            "notify": {"type": "bool", "default": False},
            "requires": {"type": "str", "default": ""},
            "package": {"type": "str", "default": ""},
            "directories": {"type": "list", "elements": "dict", "default": [], "options": {
                **_PATH_ENTRY, "mode": {"type": "str", "default": "0755"}}},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                **_PATH_ENTRY, "content": {"type": "str", "required": True, "no_log": True},
                "mode": {"type": "str", "default": "0644"},
                "validate": {"type": "list", "elements": "str", "default": []}}},
            "restart": {"type": "bool", "default": False},
            "listen": {"type": "dict", "default": {}},
            "wait_s": {"type": "int", "default": 60},
            "log": {"type": "str", "default": "/run/ray-verl/daemon.log"},
            "run_dir": {"type": "str", "default": "/run/ray-verl"},
            "conflicts": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )

    def run(argv, environ_update=None):
        return module.run_command(argv, check_rc=False, environ_update=environ_update)

    try:
        result = daemon_ctl.converge(module.params, run, module.check_mode)
    except daemon_ctl.DaemonError as exc:
        module.fail_json(msg=f"ray_daemon {module.params['name']}: {exc}")
    except OSError as exc:
        module.fail_json(msg=f"ray_daemon {module.params['name']}: {exc.strerror or exc} "
                             f"({exc.filename or 'no file'})")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
