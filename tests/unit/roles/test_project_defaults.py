"""Project defaults (roles/project_defaults) have the lowest precedence: a site's inventory file wins."""

import json
import os
import re
import subprocess
import sys

import yaml

from plugin_utils import PROJECT_ROOT

ROOT = PROJECT_ROOT
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def test_a_site_group_vars_all_wins_over_the_project_default(tmp_path):
    site = tmp_path / "site"
    (site / "group_vars").mkdir(parents=True)
    (site / "hosts.yml").write_text(yaml.safe_dump({"ray_cluster": {"children": {
        "ray_head": {"hosts": {"head": {"ansible_host": "192.0.2.10", "ansible_connection": "local",
                                        "ansible_python_interpreter": sys.executable}}},
        "ray_workers": {"hosts": {}}}}}))
    (site / "group_vars" / "all.yml").write_text("ray_version: '9.9.9'\n")
    (site / "group_vars" / "ray_cluster.yml").write_text("shared_root_path: /srv/shared\n")
    play = tmp_path / "show.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Show settings", "hosts": "ray_head", "gather_facts": False,
        "roles": [{"role": "project_defaults"}],
        "tasks": [{"name": "Show", "ansible.builtin.debug": {"msg": "SETTINGS {{ {'ray_version': ray_version,"
                   " 'shared_root': ray_config.shared_root, 'dashboard': ray_dashboard_url,"
                   " 'ray_gcs_port': ray_gcs_port} | to_json }}"}}]}]))
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run([PLAYBOOK, "-i", str(site), str(play)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"SETTINGS (\{.*?\})\"", proc.stdout)
    assert found, proc.stdout
    shown = json.loads(found.group(1).replace('\\"', '"'))
    # The site's all.yml and group file win; what the site does not set keeps the project default.
    assert shown == {"ray_version": "9.9.9", "shared_root": "/srv/shared", "dashboard": "http://192.0.2.10:8265",
                     "ray_gcs_port": 6379}


def test_every_play_applies_the_project_defaults_and_no_group_vars_outrank_a_site():
    names = [f[:-4] for f in os.listdir(os.path.join(ROOT, "playbooks")) if f.endswith(".yml")]
    assert {"up", "submit", "job", "regression"} <= set(names)
    for name in names:
        with open(os.path.join(ROOT, "playbooks", f"{name}.yml"), encoding="utf-8") as handle:
            plays = yaml.safe_load(handle)
        for play in plays:
            roles = [r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])]
            assert roles[:1] == ["project_defaults"], (name, play["name"])
    # Playbook group_vars rank above an inventory's group_vars/all.yml: no variable file may sit beside a
    # playbook (the top-level group_vars/ holds only a README that says where settings go).
    for folder in ("", "playbooks", "molecule/default"):
        found = os.path.join(ROOT, folder, "group_vars")
        if os.path.exists(found):
            assert os.listdir(found) == ["README.md"], (folder, os.listdir(found))
