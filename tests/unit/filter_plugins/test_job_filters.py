"""filter_plugins/job_filters.py: job.yml's actions come from ray_job's options table."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.jobs import options
from job_filters import ray_verl_checked_job_action


@pytest.mark.parametrize("action", ["status", "stop", "logs", "wait", "resume", "stacks"])
def test_what_a_person_asks_of_one_job_passes(action):
    assert ray_verl_checked_job_action(action) == action


@pytest.mark.parametrize("action", ["submit", "reconcile", "attempt", "", "status; rm -rf /", None])
def test_anything_else_is_one_line_naming_do_and_the_choices(action):
    with pytest.raises(AnsibleFilterError) as exc:
        ray_verl_checked_job_action(action)
    assert str(exc.value) == "do: must be one of wait, status, stop, logs, resume, stacks"


def test_the_choices_are_the_options_tables():
    assert set(options.PER_JOB) == {a for a in options.NEEDS_ID if options.ACTIONS[a][0] != "module"}
    assert set(options.PER_JOB) <= set(options.argument_spec("action")["action"]["choices"])
