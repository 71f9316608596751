"""Issue 38 §5: every entry playbook's -e knobs are data, never templates (--check included).

Ansible trusts a -e value as a template, so a play that names a knob in a template runs what the knob holds. Two
checks: every entry playbook run for real (ansible-playbook) with a template in each of its knobs, each template
touching its own marker file, on an inventory whose hosts refuse connections (nothing of a cluster is reached): no
marker may exist afterwards, and the run must refuse the knob in one line naming it, or carry the value as its
literal text. Then, since a refusal ends a run before later tasks, no template anywhere in the playbooks, the roles
or the inventories may name a knob at all.
"""

import json
import os
import re
import subprocess
import sys

import jinja2
import jinja2.nodes
import pytest
import yaml

from plugin_utils import PROJECT_ROOT, knobs

PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
SNAPSHOT_KNOBS = ["code_snapshot_verl_source", "code_snapshot_verl_id"]
SCHEDULE = ["regression_schedule_backend", "regression_schedule_time", "regression_schedule_suite",
            "regression_schedule_inventory", "regression_schedule_keep", "regression_schedule_name"]
WATCH_SCHEDULE = ["watch_schedule_backend", "watch_schedule_every_min", "watch_schedule_inventory",
                  "watch_schedule_keep", "watch_schedule_name"]
# Each entry playbook's knobs; down, status and watch take none.
ENTRY_KNOBS = {
    "acceptance": ["run_id", "acceptance_threshold", "acceptance_sft", "acceptance_require_gpus",
                   "acceptance_payload_bytes", "acceptance_warmup", "acceptance_timed", "acceptance_matmul_n",
                   *SNAPSHOT_KNOBS],
    "cordon": ["host", "state", "why", "force"],
    "doctor": ["doctor_min_free_gb", "doctor_max_clock_skew_s", "doctor_prometheus_wait_s"],
    "down": [],
    "import": ["script", "spec", "command", "force"],
    "job": ["id", "do", "poll_s", "stop_reason"],
    "regression": ["suite", "run_id"],
    "schedule": ["state", *SCHEDULE],
    "snapshot": SNAPSHOT_KNOBS,
    "status": [],
    "submit": ["spec", "submission_id", "wait", "poll_s", "preflight"],
    "up": ["force", *SNAPSHOT_KNOBS],
    "watch": [],
    "watch_schedule": ["state", *WATCH_SCHEDULE],
}
LITERAL = object()  # the run goes past the knob, which it holds as its text
# (playbook, the knobs given a template, other -e values, what the run must say): the knobs it must name in its one
# line, or LITERAL and the text that line must hold (the template as written, or the host refusing the connection).
RUNS = [
    ("acceptance", ENTRY_KNOBS["acceptance"], {}, [k for k in ENTRY_KNOBS["acceptance"]
                                                    if k != "code_snapshot_verl_source"]),
    ("cordon", ["host", "state", "why", "force"], {}, ["host", "state", "force"]),
    ("cordon", ["why"], {"host": "w1"}, (LITERAL, "Connection refused")),
    ("doctor", ENTRY_KNOBS["doctor"], {}, ENTRY_KNOBS["doctor"]),
    ("import", ENTRY_KNOBS["import"], {}, ["spec", "command", "force"]),
    ("import", ["script"], {"spec": "x"}, (LITERAL, "TEMPLATE: cannot read it")),
    ("job", ENTRY_KNOBS["job"], {}, ENTRY_KNOBS["job"]),
    ("regression", ENTRY_KNOBS["regression"], {}, ENTRY_KNOBS["regression"]),
    ("schedule", ENTRY_KNOBS["schedule"], {}, ["state"]),
    # plugin_utils/schedule.py names the first bad setting (the one it meets first: the backend).
    ("schedule", SCHEDULE, {}, ["regression_schedule_backend"]),
    ("watch_schedule", ENTRY_KNOBS["watch_schedule"], {}, ["state"]),
    ("watch_schedule", WATCH_SCHEDULE, {}, ["watch_schedule_backend"]),
    ("snapshot", SNAPSHOT_KNOBS, {}, ["code_snapshot_verl_id"]),
    ("snapshot", ["code_snapshot_verl_source"], {},
     (LITERAL, "code source TEMPLATE is neither a file nor a directory")),
    ("submit", ENTRY_KNOBS["submit"], {}, ENTRY_KNOBS["submit"]),
    ("up", ENTRY_KNOBS["up"], {}, ["force", "code_snapshot_verl_id"]),
]


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory):
    """A cluster whose hosts refuse every connection at once (port 1 of the loopback): a task that reaches a node
    fails there, UNREACHABLE, so a run never touches a cluster. The schedule's plays run on the implicit localhost,
    and the knobs refuse them before anything is installed."""
    folder = tmp_path_factory.mktemp("inventory")
    node = {"ansible_port": 1, "ansible_user": "nobody", "ansible_python_interpreter": "/usr/bin/python3"}
    (folder / "hosts.yml").write_text(yaml.safe_dump({"ray_cluster": {"children": {
        "ray_head": {"hosts": {"head": {"ansible_host": "127.0.0.1", **node}}},
        "ray_workers": {"hosts": {"w1": {"ansible_host": "127.0.0.2", **node}}}}}}))
    return str(folder / "hosts.yml")


def template(marker):
    return '{{ lookup("pipe", "touch ' + str(marker) + '") }}'


def run(playbook, inventory, *args):
    """ansible-playbook PLAYBOOK.yml on the inventory, each task's result as one line of JSON: (process, output)."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_SSH_RETRIES="0")
    proc = subprocess.run([PLAYBOOK, "-i", inventory, f"{playbook}.yml", *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return proc, proc.stdout + proc.stderr


def failures(output):
    """The messages of the run's failed or unreachable tasks (json results: one per line)."""
    found = re.findall(r"^(?:fatal|failed): \[[^\]]+\]: (?:FAILED|UNREACHABLE)! => (\{.*\})$", output, re.MULTILINE)
    return [json.loads(line)["msg"] for line in found]


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
@pytest.mark.parametrize(("playbook", "templated", "others", "says"), RUNS,
                         ids=[f"{r[0]}-{'+'.join(r[1]) if len(r[1]) < 3 else 'all'}" for r in RUNS])
def test_a_template_in_a_knob_never_runs(playbook, templated, others, says, check, unreachable, tmp_path):
    markers = {name: tmp_path / f"marker-{name}" for name in templated}
    extra = []
    for name, value in [*((n, template(m)) for n, m in markers.items()), *others.items()]:
        extra += ["-e", f"{name}={value}"]
    proc, output = run(playbook, unreachable, *extra, *(["--check"] if check else []))
    assert [name for name, marker in markers.items() if marker.exists()] == [], output
    assert proc.returncode != 0, output
    messages = failures(output)
    assert messages and all("\n" not in m for m in messages), output
    message = messages[0]
    if says[0] is LITERAL:
        [name] = templated
        assert says[1].replace("TEMPLATE", template(markers[name])) in message, output
    else:
        named = sorted(name for name in templated if re.search(rf"(^|[ ;:]){name}: ", message))
        assert named == sorted(says), message
        assert not any(str(marker) in message for marker in markers.values()), message


def test_a_template_in_a_vars_file_never_runs(unreachable, tmp_path):
    """-e @file (how scripts/regression.py's ansible-runner hands over suite and run_id): Ansible trusts the file's
    templates too; the knobs read from it are data all the same."""
    markers = {name: tmp_path / f"marker-{name}" for name in ("suite", "run_id")}
    (tmp_path / "vars.yml").write_text(yaml.safe_dump({name: template(m) for name, m in markers.items()}))
    proc, output = run("regression", unreachable, "-e", f"@{tmp_path / 'vars.yml'}")
    assert [name for name, marker in markers.items() if marker.exists()] == [], output
    assert proc.returncode != 0 and failures(output)[0].startswith("-e: suite: must be "), output
    assert "run_id: must be " in failures(output)[0], output


def test_every_entry_playbook_and_knob_is_covered():
    entries = sorted(f[:-4] for f in os.listdir(PROJECT_ROOT) if f.endswith(".yml") and os.path.isfile(
        os.path.join(PROJECT_ROOT, "playbooks", f)))
    assert entries == sorted(ENTRY_KNOBS)
    assert {name for names in ENTRY_KNOBS.values() for name in names} == set(knobs.KNOBS)
    run = {(r[0], n) for r in RUNS for n in r[1]}
    assert {(p, n) for p, names in ENTRY_KNOBS.items() for n in names} == run


# Keys whose string is a bare Jinja expression (no braces) to Ansible.
EXPRESSIONS = ("when", "that", "failed_when", "changed_when", "until")


def names(text):
    """The variables a template reads (parsed only: Ansible's filters and tests need not exist here), less those it
    sets itself (a loop's variable)."""
    tree = jinja2.Environment().parse(text)
    read = {node.name for node in tree.find_all(jinja2.nodes.Name) if node.ctx == "load"}
    return read - {node.name for node in tree.find_all(jinja2.nodes.Name) if node.ctx in ("store", "param")}


def references(value, key=None):
    """The variables a YAML value's templates and conditions name."""
    if isinstance(value, dict):
        return {name for k, v in value.items() for name in references(v, k)}
    if isinstance(value, list):
        return {name for item in value for name in references(item, key)}
    if not isinstance(value, str):
        return set()
    if key in EXPRESSIONS and "{{" not in value:
        value = "{{ " + value + " }}"
    if "{{" not in value and "{%" not in value:
        return set()
    return names(value)


def project_files():
    for folder in ("playbooks", "roles", "inventory", "molecule"):
        for parent, _, files in os.walk(os.path.join(PROJECT_ROOT, folder)):
            for name in files:
                if name.endswith((".yml", ".yaml", ".j2")):
                    yield os.path.join(parent, name)


def test_no_template_names_a_knob():
    """A knob is read by ray_knobs alone: a template that names one would run the -e value's own template."""
    named = {}
    for path in project_files():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        found = names(text) if path.endswith(".j2") else references(yaml.safe_load(text))
        for name in found & set(knobs.KNOBS):
            named.setdefault(os.path.relpath(path, PROJECT_ROOT), []).append(name)
    assert named == {}
    # The check itself sees a knob in a module argument and in a condition.
    assert references({"why": "{{ why | default(omit) }}", "when": "force | bool"}) == {"why", "force", "omit"}
