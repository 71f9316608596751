"""plugin_utils/knobs.py: the playbooks' -e knobs read as data, each checked against its one rule."""

import pytest
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible.module_utils.base import conventions
from ansible.module_utils.jobs import options

from plugin_utils import knobs

TEMPLATE = '{{ lookup("pipe", "id") }}'
SECRET = "hunter2-not-a-knob"


def no_site(var):
    raise AssertionError(f"the site's {var} was read although -e gave the knob")


def read(given, *names, site=None, **kwargs):
    return knobs.read(given, {name: name for name in names}, site or (lambda var: None), **kwargs)


def test_a_trusted_value_comes_back_as_plain_data():
    """Ansible tags a -e value as a template; what the play gets is the same text without that trust."""
    trusted = TrustedAsTemplate().tag(TEMPLATE)
    assert TrustedAsTemplate.is_tagged_on(trusted)
    out = knobs.given({"why": trusted, "nested": {"x": trusted}})
    assert out == {"why": TEMPLATE, "nested": {"x": TEMPLATE}}
    assert not TrustedAsTemplate.is_tagged_on(out["why"]) and not TrustedAsTemplate.is_tagged_on(out["nested"]["x"])


@pytest.mark.parametrize("name", ["why", "script", "code_snapshot_verl_source"])
def test_a_template_in_a_text_knob_stays_the_text(name):
    assert read({name: TEMPLATE}, name, site=no_site) == {name: TEMPLATE}


@pytest.mark.parametrize("name", sorted(set(knobs.KNOBS) - {"why", "script", "code_snapshot_verl_source"}
                                        - {n for n in knobs.KNOBS if "_schedule_" in n}))
def test_a_template_in_any_other_knob_is_one_line_naming_it(name):
    with pytest.raises(knobs.KnobError) as exc:
        read({name: TEMPLATE}, name, site=no_site)
    message = str(exc.value)
    assert message.startswith(f"-e: {name}: must be ") and "\n" not in message and "lookup" not in message


def test_every_bad_knob_is_named_in_one_line_and_no_value_is_repeated():
    with pytest.raises(knobs.KnobError) as exc:
        read({"id": SECRET + "/x", "do": SECRET, "poll_s": "0", "stop_reason": SECRET}, "id", "do", "poll_s",
             "stop_reason")
    assert str(exc.value) == ("-e: id: must be " + conventions.ID_RULE[1] + "; do: must be one of "
                              + ", ".join(options.PER_JOB) + "; poll_s: must be a whole number from 1 to 3600; "
                              "stop_reason: must be one of " + ", ".join(conventions.STOP_REASONS))
    assert SECRET not in str(exc.value)


def test_a_schedule_setting_is_passed_on_as_given_for_its_own_check():
    """plugin_utils/schedule.py checks these (naming each): the knob only makes sure it is one plain value."""
    assert read({"watch_schedule_every_min": TEMPLATE}, "watch_schedule_every_min") == \
        {"watch_schedule_every_min": TEMPLATE}
    with pytest.raises(knobs.KnobError, match="^-e: regression_schedule_time: must be a single value"):
        read({"regression_schedule_time": {"a": 1}}, "regression_schedule_time")


def test_good_values_are_typed():
    given = {"id": "job-1", "do": "stop", "poll_s": "5", "stop_reason": "SLURM_ALLOCATION_ENDING", "wait": "yes",
             "preflight": "False", "force": "1", "command": "2", "host": "lab-worker2", "state": "absent",
             "acceptance_threshold": ".25", "acceptance_payload_bytes": "1024", "doctor_min_free_gb": "0.5",
             "code_snapshot_verl_id": ""}
    assert read(given, *given) == {**given, "poll_s": 5, "wait": True, "preflight": False, "force": True,
                                   "command": 2, "acceptance_threshold": 0.25, "acceptance_payload_bytes": 1024,
                                   "doctor_min_free_gb": 0.5}
    assert read({"host": "fe80::1"}, "host") == {"host": "fe80::1"}


@pytest.mark.parametrize(("name", "value"), [
    ("host", "a b"), ("host", "../w"), ("why", "two\nlines"), ("why", "x" * 301), ("why", "\x1b[2J"),
    ("state", "synced"), ("do", "submit"), ("do", "attempt"), ("poll_s", "-1"), ("poll_s", "1.5"),
    ("acceptance_threshold", "1"), ("acceptance_threshold", "0"), ("acceptance_threshold", "nan"),
    ("doctor_max_clock_skew_s", "inf"), ("wait", "maybe"), ("force", "on"), ("command", "0"),
    ("spec", "a/b"), ("suite", ".."), ("run_id", "-rf"), ("code_snapshot_verl_id", "../x"), ("id", ["a"]),
])
def test_a_bad_value_is_refused_naming_its_knob(name, value):
    with pytest.raises(knobs.KnobError, match=f"^-e: {name}: must be "):
        read({name: value}, name)


def test_a_knob_not_given_takes_the_sites_variable_then_its_default():
    site = {"force": False, "regression_default_suite": "gpu", "code_snapshot_verl_id": "verl-0.9.1",
            "acceptance_threshold": "0.4"}
    out = read({}, "force", "suite", "code_snapshot_verl_id", "acceptance_threshold", "state", "do", "poll_s",
               "wait", "preflight", "host", "run_id", site=site.get)
    assert out == {"force": False, "suite": "gpu", "code_snapshot_verl_id": "verl-0.9.1", "acceptance_threshold": 0.4,
                   "state": "present", "do": "status", "poll_s": conventions.POLL_S, "wait": False,
                   "preflight": True, "host": None, "run_id": None}
    assert read({}, "suite")["suite"] == "lab"
    # The site's value is checked by the same rule: a site that sets a bad one is told, by name.
    with pytest.raises(knobs.KnobError, match="^-e: acceptance_threshold: must be a fraction"):
        read({}, "acceptance_threshold", site={"acceptance_threshold": 2}.get)


def test_the_site_is_asked_only_for_knobs_not_given():
    """The site's variable of a knob given with -e would be the -e value itself, templated: it is never read."""
    asked = []
    read({"force": "true", "code_snapshot_verl_source": TEMPLATE}, "force", "code_snapshot_verl_source",
         "code_snapshot_verl_id", site=lambda var: asked.append(var))
    assert asked == ["code_snapshot_verl_id"]


def test_keys_name_what_the_play_calls_each_knob():
    out = knobs.read({"code_snapshot_verl_id": "v1"},
                     {"verl_id": "code_snapshot_verl_id", "verl_source": "code_snapshot_verl_source"}, lambda var: None)
    assert out == {"verl_id": "v1", "verl_source": ""}


def test_a_required_knob_a_reserved_name_and_words_split_by_ansible():
    with pytest.raises(knobs.KnobError, match=r"^-e: id: must be given \(-e id=\.\.\.\)$"):
        read({}, "id", required=["id"])
    with pytest.raises(knobs.KnobError, match="^-e: job_args: is this play's own variable, not a knob$"):
        read({"job_args": TEMPLATE, "id": "a"}, "id", reserved=["job_args"])
    with pytest.raises(knobs.KnobError, match="^-e: must be key=value; quote a value with spaces"):
        read({"why": "two", "_raw_params": "words"}, "why")


def test_do_takes_what_a_person_asks_of_one_job():
    assert set(options.PER_JOB) == {a for a in options.NEEDS_ID if options.ACTIONS[a][0] != "module"}
    assert set(options.PER_JOB) <= set(options.argument_spec("action")["action"]["choices"])
    for action in options.PER_JOB:
        assert read({"do": action}, "do") == {"do": action}
