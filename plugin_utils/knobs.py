"""The entry playbooks' -e knobs (-e id=..., -e host=..., -e state=...), read as data.

Ansible trusts a -e value as a template: a task that says `{{ host }}` runs whatever `-e 'host={{ lookup("pipe",
...) }}'` holds, --check included. So no playbook or role names a knob in a template. The ray_knobs action
(action_plugins/ray_knobs.py) reads the knobs a play takes from this run's command line, as given (load_extra_vars,
a JSON round trip drops the trust), checks each against its one rule below, and the play uses its result (a module
result is data to Ansible: never templated again). A knob not given takes the site's variable it stands for (the
inventory's, the role's default: the site's own configuration) or its default. A bad value is one line naming the
knob and its rule, never the value: it may be a secret given by mistake.
"""

import ipaddress
import json
from dataclasses import dataclass

from ansible.module_utils.base import conventions
from ansible.module_utils.cordons import cordons
from ansible.module_utils.jobs import options

from plugin_utils.settings import SettingError

_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _text(value):
    if isinstance(value, (dict, list)):
        raise TypeError("must be a single value, not a list or a mapping")
    return "" if value is None else str(value)


def _boolean(value):
    if isinstance(value, bool):
        return value
    word = _text(value).strip().lower()
    if word not in _TRUE + _FALSE:
        raise ValueError("must be true or false")
    return word in _TRUE


def _choice(*choices):
    def check(value):
        if _text(value) not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return _text(value)
    return check


def _whole(low, high):
    def check(value):
        text = _text(value).strip()
        if isinstance(value, bool) or not text.isdigit() or not low <= int(text) <= high:
            raise ValueError(f"must be a whole number from {low} to {high}")
        return int(text)
    return check


def _number(low, high):
    def check(value):
        try:
            number = float(_text(value)) if not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            raise ValueError(f"must be a number from {low:g} to {high:g}")
        return number
    return check


def _fraction(value):
    try:
        number = _number(0, 1)(value)
    except ValueError:
        number = None
    if number is None or not 0 < number < 1:
        raise ValueError("must be a fraction between 0 and 1, such as 0.5")
    return number


def _rule(rule, empty=False):
    """A value that follows one of conventions' rules (or, with empty, is empty)."""
    def check(value):
        text = _text(value)
        if not (empty and text == "") and not conventions.matches(rule, text):
            raise ValueError(f"must be {rule[1]}" + (" (or empty)" if empty else ""))
        return text
    return check


def _host(value):
    """A worker's inventory name or an address: ray_cordon then looks it up among the inventory's workers."""
    text = _text(value)
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not conventions.matches(conventions.NAME_RULE, text):
        raise ValueError("must be an inventory worker's name or its address")
    return text


def _line(width):
    def check(value):
        text = _text(value)
        if len(text) > width or text != conventions.printable(text, keep_newlines=False):
            raise ValueError(f"must be one line of at most {width} printable characters")
        return text
    return check


def _scalar(value):
    """A single value, checked where it is used (plugin_utils/schedule.py names the setting and its rule)."""
    return value if isinstance(value, (bool, int, float)) else _text(value)


@dataclass(frozen=True)
class Knob:
    rule: object  # value -> checked value; ValueError or TypeError saying what a good value is
    default: object = None
    var: str = None  # the site's variable it stands for when not given: templated (site configuration), never -e


KNOBS = {
    # job.yml, submit.yml
    "id": Knob(_rule(conventions.ID_RULE)),
    "submission_id": Knob(_rule(conventions.ID_RULE)),
    "do": Knob(_choice(*options.PER_JOB), "status"),
    "poll_s": Knob(_whole(1, 3600), conventions.POLL_S),
    "stop_reason": Knob(_choice(*conventions.STOP_REASONS), conventions.DEFAULT_STOP_REASON),
    "spec": Knob(_rule(conventions.NAME_RULE)),
    "wait": Knob(_boolean, False),
    "preflight": Knob(_boolean, True),
    # import.yml (verl_import reads the script and names it when it cannot)
    "script": Knob(_line(4096)),
    "command": Knob(_whole(1, 1000)),
    # cordon.yml; force is up.yml's too (restart a node a job runs on)
    "host": Knob(_host),
    "why": Knob(_line(cordons.WHY_MAX)),
    "state": Knob(_choice("present", "absent"), "present"),
    "force": Knob(_boolean, False, var="force"),
    # regression.yml, acceptance.yml
    "suite": Knob(_rule(conventions.NAME_RULE), "lab", var="regression_default_suite"),
    "run_id": Knob(_rule(conventions.ID_RULE)),
    "acceptance_threshold": Knob(_fraction, 0.5, var="acceptance_threshold"),
    "acceptance_sft": Knob(_boolean, True, var="acceptance_sft"),
    "acceptance_require_gpus": Knob(_boolean, False, var="acceptance_require_gpus"),
    **{name: Knob(_whole(1, 10**12), var=name) for name in (
        "acceptance_payload_bytes", "acceptance_warmup", "acceptance_timed", "acceptance_matmul_n")},
    # the code_snapshot role (up.yml, snapshot.yml, acceptance.yml): the code_snapshot_source lookup reads the source
    "code_snapshot_verl_source": Knob(_line(4096), "", var="code_snapshot_verl_source"),
    "code_snapshot_verl_id": Knob(_rule(conventions.ID_RULE, empty=True), "", var="code_snapshot_verl_id"),
    # doctor.yml
    "doctor_min_free_gb": Knob(_number(0, 10**6), 5, var="doctor_min_free_gb"),
    "doctor_max_clock_skew_s": Knob(_number(0, 86400), 5, var="doctor_max_clock_skew_s"),
    "doctor_prometheus_wait_s": Knob(_whole(0, 3600), 30, var="doctor_prometheus_wait_s"),
    # the regression_schedule role (schedule.yml, watch_schedule.yml): plugin_utils/schedule.py checks each
    **{f"{kind}_schedule_{field}": Knob(_scalar, var=f"{kind}_schedule_{field}")
       for kind, fields in (("regression", ("time", "suite")), ("watch", ("every_min",)))
       for field in ("backend", "inventory", "keep", "name", *fields)},
}


class KnobError(SettingError):
    """One line naming every bad knob and its rule (never a value)."""


def given(extra_vars):
    """This run's -e values as data: a JSON round trip keeps the values and drops Ansible's trust in them."""
    return json.loads(json.dumps(dict(extra_vars or {}), default=str))  # a date in -e @file: its text


def read(extra_vars, wanted, site_value, required=(), reserved=()):
    """{key: checked value} of the knobs wanted ({key: knob name}): -e's as given, else site_value(var) (the site's
    variable, or None when it has none), else the knob's default.

    required: knobs that must be given; reserved: names a -e may not set (the play's own variables).
    Raises KnobError naming each bad knob."""
    raw = given(extra_vars)
    if "_raw_params" in raw:  # Ansible splits `-e key=two words` at the space and keeps the rest here
        raise KnobError("-e", "must be key=value; quote a value with spaces, e.g. -e \"why='two words'\"")
    errors = [f"{name}: is this play's own variable, not a knob" for name in reserved if name in raw]
    out = {}
    for key, name in wanted.items():
        knob = KNOBS[name]
        if name in raw:
            value = raw[name]
        elif name in required:
            errors.append(f"{name}: must be given (-e {name}=...)")
            continue
        else:
            value = site_value(knob.var) if knob.var else None
            if value is None:
                out[key] = knob.default
                continue
        try:
            out[key] = knob.rule(value)
        except (TypeError, ValueError) as exc:
            errors.append(f"{name}: {exc}")
    if errors:
        raise KnobError("-e", "; ".join(errors))
    return out
