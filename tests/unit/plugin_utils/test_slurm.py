"""A Slurm allocation as an inventory (plugin_utils/slurm.py; the slurm_allocation plugin that uses it is tested in
tests/unit/inventory_plugins/) and the batch entry point's plan and steps (scripts/slurm_batch.py). Slurm's answers
are real scontrol output from the lab (tests/unit/data/slurm/, read through tests/unit/slurm_harness.py)."""

import json
import os
import signal

import lab_slurm
import pytest
import slurm_batch
from slurm_harness import HOSTNAMES, JOB, fake_scontrol, read

from plugin_utils import PROJECT_ROOT, slurm

ROOT = PROJECT_ROOT


def test_the_labs_allocation_is_a_head_and_a_worker_with_its_gpus():
    alloc = slurm.allocation(JOB, fake_scontrol(read("show_job_d.txt")))
    assert alloc.head == "lab-worker1" and alloc.workers == ("lab-worker2",)
    assert alloc.gpus == {"lab-worker1": 3, "lab-worker2": 3}
    assert alloc.addresses == {"lab-worker1": "198.18.0.11", "lab-worker2": "198.18.0.12"}
    assert slurm.inventory_vars(alloc) == {
        "lab-worker1": {"slurm_job_id": JOB, "ansible_host": "198.18.0.11"},
        "lab-worker2": {"slurm_job_id": JOB, "ansible_host": "198.18.0.12", "ray_worker_num_gpus": 3}}


def test_nodes_with_different_gres_each_get_their_own_count():
    text = read("show_job_d.txt").replace("lab-worker[1-2]", "a[1-2]").replace(
        "     Nodes=a[1-2] CPU_IDs=0 Mem=0 GRES=gpu:3(IDX:0-2)\n",
        "     Nodes=a1 CPU_IDs=0-7 Mem=0 GRES=gpu:a100:8(IDX:0-7)\n"
        "     Nodes=a2 CPU_IDs=0-7 Mem=0 GRES=gpu:a100:2(IDX:0,3),nvme:1(IDX:0)\n")
    alloc = slurm.allocation(JOB, fake_scontrol(text, "NodeName=a1 NodeAddr=a1\nNodeName=a2 NodeAddr=10.0.0.2\n"))
    assert alloc.gpus == {"a1": 8, "a2": 2} and alloc.addresses == {"a1": "a1", "a2": "10.0.0.2"}
    assert slurm.inventory_vars(alloc)["a1"] == {"slurm_job_id": JOB}  # the name is its address


@pytest.mark.parametrize(("gres", "gpus"), [("gpu:4(IDX:0-3)", 4), ("gpu:h100:2(IDX:0-1),gpu:a10:1(IDX:2)", 3),
                                            ("nvme:1", 0), ("", 0), (None, 0)])
def test_gpu_count(gres, gpus):
    assert slurm.gpu_count(gres) == gpus


def test_a_job_without_gres_gives_its_workers_no_gpus():
    text = read("show_job_d.txt").replace(" GRES=gpu:3(IDX:0-2)", "").replace("   JOB_GRES=gpu:6\n", "")
    assert slurm.allocation(JOB, fake_scontrol(text)).gpus["lab-worker2"] == 0


def test_a_gres_field_anywhere_on_its_line_is_counted():
    text = read("show_job_d.txt").replace("GRES=gpu:3(IDX:0-2)", "GRES=gpu:3(IDX:0-2) Extra=x")
    assert slurm.allocation(JOB, fake_scontrol(text)).gpus["lab-worker2"] == 3


def test_gpus_held_but_unreadable_fail_closed():
    text = read("show_job_d.txt").replace("GRES=gpu:3(IDX:0-2)", "GRES_IDX=gpu(IDX:0-2)")
    with pytest.raises(slurm.SlurmError, match="holds gpu:6 but no node's GPUs could be read"):
        slurm.allocation(JOB, fake_scontrol(text))


def test_an_array_task_is_found_by_its_array_id():
    text = read("show_job_d.txt").replace("JobId=59544061 ", "JobId=15 ArrayJobId=12 ArrayTaskId=3 ")
    assert slurm.allocation("12_3", fake_scontrol(text)).nodes == ("lab-worker1", "lab-worker2")
    assert slurm.allocation("15", fake_scontrol(text)).job_id == "15"
    with pytest.raises(slurm.SlurmError, match="did not describe Slurm job 12_4"):
        slurm.allocation("12_4", fake_scontrol(text))


def test_free_text_that_looks_like_fields_changes_nothing(monkeypatch):
    monkeypatch.setitem(HOSTNAMES, "evil[1-2]", "evil1\nevil2\n")
    text = read("show_job_d.txt").replace("WorkDir=/work/main", "WorkDir=/tmp/x NodeList=evil[1-2] JobState=RUNNING")
    text = text.replace("JobState=RUNNING Reason", "JobState=COMPLETED Reason").replace(
        "JobName=interactive", "JobName=a NodeList=evil[1-2] JobState=RUNNING")
    with pytest.raises(slurm.SlurmError, match="is COMPLETED"):
        slurm.allocation(JOB, fake_scontrol(text))


@pytest.mark.parametrize(("edit", "message"), [
    (("JobState=RUNNING", "JobState=PENDING"), f"Slurm job {JOB} is PENDING, not RUNNING"),
    (("JobState=RUNNING", "JobState=COMPLETED"), "is COMPLETED, not RUNNING: it holds no nodes"),
    (("NodeList=lab-worker[1-2]", "NodeList=lab-worker1"), "holds 1 node(s): the Ray head takes no work"),
    (("JobId=59544061", "JobId=7"), f"scontrol did not describe Slurm job {JOB}"),
])
def test_an_allocation_that_cannot_be_a_cluster_is_refused_in_one_line(edit, message):
    with pytest.raises(slurm.SlurmError) as err:
        slurm.allocation(JOB, fake_scontrol(read("show_job_d.txt").replace(*edit)))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_completing_job_still_holds_its_nodes():
    text = read("show_job_d.txt").replace("JobState=RUNNING", "JobState=COMPLETING")
    assert slurm.allocation(JOB, fake_scontrol(text)).nodes == ("lab-worker1", "lab-worker2")


@pytest.mark.parametrize(("node_text", "field"), [
    ("NodeName=lab-worker1 NodeAddr=198.18.0.11\nNodeName=lab-worker2 NodeAddr=-oProxyCommand=x\n", "address"),
    ("NodeName=lab-worker1 NodeAddr=198.18.0.11\nNodeName=lab-worker2 NodeAddr=a;reboot\n", "address"),
])
def test_an_address_that_is_not_a_host_is_refused(node_text, field):
    with pytest.raises(slurm.SlurmError, match=f"node lab-worker2's {field}"):
        slurm.allocation(JOB, fake_scontrol(read("show_job_d.txt"), node_text))


def test_a_node_name_that_is_not_a_host_is_refused(monkeypatch):
    monkeypatch.setitem(HOSTNAMES, "evil", "lab-worker1\n$(reboot)\n")
    text = read("show_job_d.txt").replace("NodeList=lab-worker[1-2]", "NodeList=evil")
    with pytest.raises(slurm.SlurmError, match=r"node name '\$\(reboot\)' is not a plain host name"):
        slurm.allocation(JOB, fake_scontrol(text))


@pytest.mark.parametrize("job_id", ["", "abc", "12;reboot", "1" * 13, "-1"])
def test_a_job_id_is_digits(job_id):
    with pytest.raises(slurm.SlurmError, match="job_id"):
        slurm.checked_job_id(job_id)
    assert slurm.checked_job_id("12_3") == "12_3"


def test_a_pinned_allocation_is_used_only_for_its_own_job_and_is_checked():
    alloc = slurm.allocation(JOB, fake_scontrol(read("show_job_d.txt")))
    assert slurm.pinned(JOB, alloc.to_json()) == alloc
    assert slurm.pinned("123", alloc.to_json()) is None
    with pytest.raises(slurm.SlurmError, match=slurm.PINNED_ENV):
        slurm.pinned(JOB, "{not json")
    doc = json.loads(alloc.to_json())
    doc["addresses"]["lab-worker2"] = "x y"
    with pytest.raises(slurm.SlurmError, match="address"):
        slurm.pinned(JOB, json.dumps(doc))
    with pytest.raises(slurm.SlurmError, match=slurm.PINNED_ENV):
        slurm.pinned(JOB, json.dumps(dict(json.loads(alloc.to_json()), nodes="ab")))
    doc = json.loads(alloc.to_json())
    doc["gpus"]["lab-worker2"] = "4; reboot"
    with pytest.raises(slurm.SlurmError, match="GPU count"):
        slurm.pinned(JOB, json.dumps(doc))


def test_scontrol_missing_or_failing_is_one_line(tmp_path):
    with pytest.raises(slurm.SlurmError, match="not found: run on a node of the Slurm cluster"):
        slurm.scontrol_runner(str(tmp_path / "no-scontrol"))("show", "job", "1")
    failing = tmp_path / "scontrol"
    failing.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(slurm.SlurmError, match="show job 1: slurm_load_jobs error: Invalid job id specified$"):
        slurm.scontrol_runner(str(failing))("show", "job", "1")


# ------------------------------------------------------------------ the batch entry point


def env(**extra):
    return {"SLURM_JOB_ID": JOB, "SLURM_SUBMIT_DIR": ROOT, **extra}


def lab_allocation(_slurm, job_id):
    return slurm.allocation(job_id, fake_scontrol(read("show_job_d.txt")))


def plan(*args, **extra):
    return slurm_batch.make_plan(["-i", "inventory/slurm-lab", "--spec", "smoke", *args], env(**extra),
                                 read=lab_allocation)


def test_the_plan_runs_the_runbook_with_the_allocation_pinned():
    assert plan("-e", 'entrypoint="echo a; sleep 1"').extra == ('entrypoint="echo a; sleep 1"',)
    p = plan("-e", "timeouts.max_run_s=600")
    assert p.submission_id == f"slurm-{JOB}-smoke" and p.repo == type(p.repo)(ROOT)
    assert p.up()[1:] == ["-i", os.path.join(ROOT, "inventory", "slurm-lab"), "up.yml"]
    assert p.submit()[3:] == ["submit.yml", "-e", "spec=smoke", "-e", f"submission_id=slurm-{JOB}-smoke",
                              "-e", "wait=true", "-e", f"metadata.slurm_job_id={JOB}",
                              "-e", "timeouts.max_run_s=600"]
    assert p.stop()[-2:] == ["-e", "stop_reason=SLURM_ALLOCATION_ENDING"]
    assert json.loads(p.pinned[slurm.PINNED_ENV])["nodes"] == ["lab-worker1", "lab-worker2"]
    assert p.summary == f"Slurm job {JOB}: Ray head on lab-worker1, workers lab-worker2 (3 GPUs)"


@pytest.mark.parametrize(("args", "extra", "field"), [
    (["--spec", "../etc/passwd"], {}, "--spec: must be a spec name"),
    (["--spec", "nosuchspec"], {}, "--spec: there is no jobspecs/nosuchspec.yaml"),
    (["--id", "a b"], {}, "--id: must be 1-128 letters, digits or ._- starting with a letter or digit"),
    (["--id", "../x"], {}, "--id: must be 1-128 letters, digits or ._- starting with a letter or digit"),
    (["--id", "abc123 x"], {}, "--id: must be 1-128 letters"),
    (["-e", "noequals"], {}, "-e #1: each word must be KEY=VALUE"),
    (["-e", "x=1", "-e", "abc123"], {}, "-e #2: each word must be KEY=VALUE"),
    (["-e", "submission_id=other"], {}, "-e submission_id: is not a JobSpec field this script passes on"),
    (["-e", "@/etc/shadow=x"], {}, "-e #1: must be KEY=VALUE words for JobSpec fields (not @file, JSON or YAML)"),
    (["-e", '{"env": 1}=x'], {}, "-e #1: must be KEY=VALUE words"),
    (["-i", "inventory/nosuch"], {}, "--inventory: inventory/nosuch is not a Slurm inventory"),
    (["-i", "inventory/lab"], {}, "--inventory: inventory/lab is not a Slurm inventory"),
    (["-e", "timeouts.max_run_s=600 wait=false"], {}, "-e wait: is not a JobSpec field this script passes on"),
    (["-e", "ansible_ssh_common_args=-oProxyCommand=x"], {}, "-e ansible_ssh_common_args: is not a JobSpec field"),
    (["-e", 'entrypoint="unbalanced abc123'], {}, "-e #1: unbalanced quotes"),
    ([], {"SLURM_JOB_ID": "1 2"}, "SLURM_JOB_ID: '1 2' is not a Slurm job id"),
    (["-e", "env.WANDB_API_KEY=abc123"], {}, "-e: env.WANDB_API_KEY is a secret, and sbatch's arguments are kept"),
    (["-e", "env.MY_TOKEN=abc123 env.X=1"], {}, "-e: env.MY_TOKEN is a secret"),
    (["-e", "env.HF_TOKEN=abc123 wait=false"], {}, "-e: env.HF_TOKEN is a secret"),
    (["-e", 'env.HF_TOKEN="abc123'], {}, "-e: env.HF_TOKEN is a secret"),
    # Issue 22 §1: a secret in every -e form, and names the broader rule calls secret.
    (["-e", 'env={"HF_TOKEN":"abc123"}'], {}, "-e: env.HF_TOKEN is a secret"),
    (["-e", 'env={"PLAIN": "x", "HF_TOKEN": "abc123"}'], {}, "-e: env.HF_TOKEN is a secret"),
    (["-e", "env='{\"WANDB_API_KEY\": \"abc123\"}'"], {}, "-e: env.WANDB_API_KEY is a secret"),
    (["-e", "env={HF_TOKEN: abc123}"], {}, "-e: env.HF_TOKEN is a secret"),
    (["-e", '{"env": {"OPENAI_APIKEY": "abc123"}}'], {}, "-e: env.OPENAI_APIKEY is a secret"),
    (["-e", '{"evn": {"WANDB_API_KEY": "abc123"}}'], {}, "-e: evn.WANDB_API_KEY is a secret"),
    (["-e", "env.hf_token_rw=abc123"], {}, "-e: env.hf_token_rw is a secret"),
    (["-e", "env.GITHUB_TOKEN_2=abc123"], {}, "-e: env.GITHUB_TOKEN_2 is a secret"),
    (["-e", "metadata.MY_SECRET_VALUE=abc123"], {}, "-e: metadata.MY_SECRET_VALUE is a secret"),
    (["-e", 'env={"PRIVATE_KEY_PEM": "abc123"'], {}, "-e: env.PRIVATE_KEY_PEM is a secret"),
    ([], {"SLURM_JOB_ID": ""}, "SLURM_JOB_ID is not set: run this through sbatch"),
    ([], {"SLURM_SUBMIT_DIR": "/"}, "--repo: / is not this project's folder"),
])
def test_bad_arguments_are_refused_naming_the_field(args, extra, field):
    with pytest.raises(slurm_batch.BatchError) as err:
        plan(*args, **extra)
    assert str(err.value).startswith(field) and "\n" not in str(err.value) and "abc123" not in str(err.value)


def test_the_batch_script_runs_itself_again_with_the_projects_venv(tmp_path):
    # Slurm starts the spool copy with the node's python3 (no Ansible): it goes on in the venv that has it.
    repo = tmp_path / "repo"
    argv = ["-i", "inventory/slurm-lab", "--spec", "smoke"]
    again = slurm_batch.reexec_argv(repo, argv, "/var/spool/slurmd/job1/slurm_script", prefix="/usr")
    assert again == [str(repo / ".venv" / "bin" / "python"), "/var/spool/slurmd/job1/slurm_script", *argv]
    assert slurm_batch.reexec_argv(repo, argv, "x", prefix=str(repo / ".venv")) is None
    assert slurm_batch.reexec_argv(type(repo)(ROOT), argv, "x") is None  # these tests run in the project's venv


def test_an_allocation_slurm_refuses_stops_the_plan():
    def one_node(_slurm, job_id):
        text = read("show_job_d.txt").replace("NodeList=lab-worker[1-2]", "NodeList=lab-worker1")
        return slurm.allocation(job_id, fake_scontrol(text))
    with pytest.raises(slurm_batch.BatchError, match="needs at least 2 nodes"):
        slurm_batch.make_plan(["-i", "inventory/slurm-lab", "--spec", "smoke"], env(), read=one_node)


class Child:
    """A playbook run: ends with rc, or when signalled (SIGINT), or hands control to `during` first."""

    def __init__(self, argv, rc, during=None):
        self.argv, self.rc, self.during, self.signals = argv, rc, during, []

    def poll(self):
        return None

    def send_signal(self, signum):
        self.signals.append(signum)

    def wait(self):
        if self.during:
            self.during()
        return 130 if self.signals else self.rc


def batch(rcs=None, during=None, spawning=None):
    """A Batch whose playbook runs are recorded; rcs, during and spawning are keyed by playbook name."""
    rcs, during, spawning = rcs or {}, during or {}, spawning or {}
    b = slurm_batch.Batch(plan(), say=lambda line: said.append(line))
    said, runs = [], []

    def spawn(argv, cwd, env):
        name = argv[3]
        assert env[slurm.PINNED_ENV] == b.plan.pinned[slurm.PINNED_ENV] and cwd == ROOT
        child = Child(argv, rcs.get(name, 0), during.get(name) and (lambda: during[name](b)))
        runs.append(child)
        if spawning.get(name):
            spawning[name](b)  # a signal while the child starts, before step() holds it
        return child
    b.spawn = spawn
    return b, runs, said


def names(runs):
    return [c.argv[3] + (" stop" if "do=stop" in c.argv else "") for c in runs]


def test_a_job_that_ends_runs_up_submit_down():
    b, runs, said = batch()
    assert b.run() == 0 and names(runs) == ["up.yml", "submit.yml", "down.yml"]
    assert said[-1] == f"slurm-{JOB}-smoke: SUCCEEDED"


def test_a_failed_up_submits_nothing_and_still_takes_ray_down():
    b, runs, _ = batch(rcs={"up.yml": 2})
    assert b.run() == 1 and names(runs) == ["up.yml", "down.yml"]


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_slurms_signal_during_the_job_stops_it_for_the_record_then_takes_ray_down(signum):
    b, runs, said = batch(during={"submit.yml": lambda b: b.on_signal(signum)})
    assert b.run() == slurm_batch.EXIT_ENDED_BY_SLURM
    assert names(runs) == ["up.yml", "submit.yml", "job.yml stop", "down.yml"]
    assert runs[1].signals == [signal.SIGINT]  # the wait was cut short
    assert said[-1] == (f"ended by Slurm ({signal.Signals(signum).name}): slurm-{JOB}-smoke stopped, its record "
                        "says SLURM_ALLOCATION_ENDING")


def test_a_signal_while_the_wait_starts_is_not_lost():
    b, runs, _ = batch(spawning={"submit.yml": lambda b: b.on_signal(signal.SIGUSR1)})
    assert b.run() == slurm_batch.EXIT_ENDED_BY_SLURM and runs[1].signals == [signal.SIGINT]
    assert names(runs) == ["up.yml", "submit.yml", "job.yml stop", "down.yml"]


def test_a_signal_after_the_job_ended_is_not_a_stop():
    b, runs, said = batch(during={"down.yml": lambda b: b.on_signal(signal.SIGTERM)})
    assert b.run() == 0 and said[-1] == f"slurm-{JOB}-smoke: SUCCEEDED"
    assert names(runs) == ["up.yml", "submit.yml", "down.yml"]


def test_a_signal_during_up_submits_nothing():
    b, runs, said = batch(during={"up.yml": lambda b: b.on_signal(signal.SIGTERM)})
    assert b.run() == slurm_batch.EXIT_ENDED_BY_SLURM and names(runs) == ["up.yml", "down.yml"]
    assert said[-1] == "ended by Slurm (SIGTERM): nothing was submitted"


def test_a_signal_while_ray_is_taken_down_never_interrupts_it():
    b, runs, _ = batch(during={"down.yml": lambda b: b.on_signal(signal.SIGTERM)})
    b.run()
    assert names(runs) == ["up.yml", "submit.yml", "down.yml"] and runs[-1].signals == []


def test_a_stop_that_fails_leaves_the_record_read_once_more():
    b, runs, said = batch(rcs={"job.yml": 2}, during={"submit.yml": lambda b: b.on_signal(signal.SIGTERM)})
    b.run()
    assert names(runs) == ["up.yml", "submit.yml", "job.yml stop", "job.yml", "down.yml"]
    assert "stopping slurm-59544061-smoke failed (rc=2)" in said[-1]


# ------------------------------------------------------------------ the lab's Slurm configuration


def test_the_labs_slurm_conf_names_every_worker_and_the_head_as_controller():
    import lab
    hosts = lab.plan_hosts(2)
    text = lab_slurm.render_slurm_conf(hosts[0], hosts[1:], 2, 1234)
    assert "SlurmctldHost=lab-head(198.18.0.10)" in text and "FirstJobId=1234" in text
    assert "NodeName=lab-worker2 NodeAddr=198.18.0.12 CPUs=2 Gres=gpu:4 State=UNKNOWN" in text
    assert "PartitionName=lab Nodes=lab-worker1,lab-worker2 Default=YES" in text
    assert lab_slurm.render_gres_conf(hosts[1:2]) == "NodeName=lab-worker1 Name=gpu File=/run/lab-gpu/gpu[0-3]\n"
    assert "slurmctld -f" in lab_slurm.host_script(hosts[0]) and "slurmd" not in lab_slurm.host_script(hosts[0])
    assert "slurmd -f" in lab_slurm.host_script(hosts[1]) and "-N lab-worker1" in lab_slurm.host_script(hosts[1])
    assert 1000 <= lab_slurm.first_job_id(1.8e9) < 67043328


@pytest.mark.parametrize("name", ["submit.yml", "up.yml"])
def test_a_playbook_ended_by_slurms_signal_before_our_handler_ran_is_slurm_ending_the_job(name):
    # scancel signals every process of the job in no set order: here the playbook dies of SIGTERM first.
    b, runs, said = batch(rcs={name: -signal.SIGTERM})
    assert b.run() == slurm_batch.EXIT_ENDED_BY_SLURM
    if name == "submit.yml":
        assert names(runs) == ["up.yml", "submit.yml", "job.yml stop", "down.yml"]
        assert said[-1].startswith("ended by Slurm (SIGTERM): slurm-") and "SLURM_ALLOCATION_ENDING" in said[-1]
    else:
        assert names(runs) == ["up.yml", "down.yml"] and said[-1] == "ended by Slurm (SIGTERM): nothing was submitted"


def test_a_playbook_that_fails_on_its_own_is_not_slurm_ending_the_job():
    b, runs, said = batch(rcs={"submit.yml": 2})
    assert b.run() == 1 and names(runs) == ["up.yml", "submit.yml", "down.yml"]
    assert said[-1] == f"slurm-{JOB}-smoke: did not succeed (rc=2)"
