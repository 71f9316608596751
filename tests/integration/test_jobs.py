"""submit.yml, job.yml and the ray_job module on the lab (issue: job submission and the job record)."""

import concurrent.futures
import json
import os
import re

import pytest
from ansible.module_utils.base import ray_cluster
from conftest import (
    DASHBOARD,
    HEAD,
    IPS,
    RECORDS,
    ROOT,
    TOKEN,
    WORKER1,
    WORKER2,
    new_id,
    nodes,
    playbook,
    ssh,
    wait_for,
)
from jobs_helpers import hashes, ray_jobs, read, record, start_long_job, status

pytestmark = pytest.mark.usefixtures("cluster_up")


def ray_logs(sid):
    ray_cluster.prepare_client_env(TOKEN)
    return ray_cluster.job_client(DASHBOARD, ray_cluster.read_token(TOKEN)).get_job_logs(sid)


def test_smoke_runs_on_a_worker_and_leaves_a_complete_record():
    sid = new_id("smoke")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "wait=true")
    assert run.rc == 0, run
    assert f"record: /private/jobs/{sid}" in run.out and "SUCCEEDED" in run.out
    st = status(sid)
    assert st["state"] == "SUCCEEDED" and st["final"] and st["driver_exit_code"] == 0
    assert st["driver_on_worker"] is True and st["driver_node_ip"] in (IPS[WORKER1], IPS[WORKER2])
    assert st["code_path"] == "/private/common/code/smoke"
    assert {"submit_s", "pending_s", "running_s", "total_s"} <= set(st["phases"])
    spec = json.loads(read(sid, "config", "job_spec.json"))
    assert spec["submission_id"] == sid and spec["workload"] == "smoke" and spec["save_freq"] == 10
    runtime_env = json.loads(read(sid, "config", "runtime_env.json"))
    # user/code is opt-in (issue 10 §4): a job that does not ask for it does not import from it.
    assert runtime_env["env_vars"]["PYTHONPATH"].startswith("/private/common/code/smoke")
    assert "/private/user/code" not in runtime_env["env_vars"]["PYTHONPATH"]
    assert "PYTHONPATH" in json.loads(read(sid, "config", "env_var_names.json"))
    cmd = read(sid, "config", "submit_cmd.txt")
    assert cmd.startswith("ray job submit ") and f"--submission-id {sid}" in cmd and "worker_node" in cmd
    assert f"submitted {sid}" in read(sid, "logs", "ray_job_submit.out")
    assert "smoke_probe: wrote" in read(sid, "logs", "driver.log")
    probe = json.loads(read(sid, "checkpoints", "smoke.json"))
    assert probe["on_worker"] and probe["module_file"] == "/private/common/code/smoke/smoke_probe.py"
    for snap in ("ray_status_pre.txt", "ray_status_post.txt"):
        text = read(sid, "debug", snap)
        assert "Node status" in text and f"worker {IPS[WORKER1]} ALIVE" in text
    assert sid in read(sid, "debug", "ray_job_list_post.txt")


def test_same_id_again_submits_nothing_and_keeps_the_record_byte_for_byte():
    sid = new_id("again")
    first = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "wait=true")
    assert first.rc == 0, first
    before = hashes(sid)
    again = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}")
    assert again.rc == 0, again
    assert "already existed, not resubmitted" in again.out
    assert again.changed("lab-head") == 0
    assert hashes(sid) == before


def test_check_mode_shows_the_submission_and_changes_nothing():
    sid = new_id("check")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "--check")
    assert run.rc == 0, run
    assert "entrypoint:" in run.out and "smoke_probe" in run.out and "PYTHONPATH" in run.out
    assert "check mode: nothing submitted" in run.out
    assert not os.path.exists(record(sid)) and sid not in ray_jobs()


BAD_SPEC_FILES = {"it_bad_yaml": "workload: smoke\n  timeouts: [1,\n", "it_bad_list": "- workload: smoke\n"}

BAD_INPUTS = [
    (["spec=does-not-exist"], "spec"),
    (["spec=../smoke"], "spec"),
    (["spec=it_bad_yaml"], "spec"),
    (["spec=it_bad_list"], "spec"),
    (["submission_id=../x"], "submission_id"),
    (["submission_id=a/b"], "submission_id"),
    (["submission_id=.hidden"], "submission_id"),
    (["submission_id=" + "x" * 200], "submission_id"),
    (["workload=train"], "workload"),
    (["save_frq=5"], "save_frq"),
    (["save_freq=0"], "save_freq"),
    (["save_freq=-2"], "save_freq"),  # -1 is verl's "no checkpoints"
    (["save_freq=abc"], "save_freq"),
    (["resources.nnodes=0"], "resources.nnodes"),
    (["resources.nnodes=two"], "resources.nnodes"),
    (["timeouts.pending_s=0"], "timeouts.pending_s"),
    (['{"timeouts": {"max_run_s": "soon"}}'], "timeouts.max_run_s"),
    (['{"resources": {"gpus": 1}}'], "resources.gpus"),
    (['{"env": {"A": 1}}'], "env.A"),
    (['{"env": {"1BAD": "x"}}'], "env"),
    (['{"metadata": "x"}'], "metadata"),
    (['{"overrides": ["novalue"]}'], "overrides"),
    # The lab's site defaults give trainers a model and data: clear them to see the checks.
    (["workload=sft", "model_path=null"], "model_path"),
    (["workload=ppo", "train_files=null"], "train_files"),
    (["workload=sft", "model_path=relative/m", "train_files=/private/datasets/t.parquet"], "model_path"),
    (["code_id=v1", "code_path=/private/common/code/verl/v1"], "code_path"),
    (["output_dir=/etc/evil"], "output_dir"),
    (['entrypoint="echo hi"'], "entrypoint"),
    (["entrypoint=echo hi"], "-e"),
    (["workload=command"], "entrypoint"),
]


@pytest.fixture(scope="module")
def bad_spec_files():
    made = []
    for name, text in BAD_SPEC_FILES.items():
        path = os.path.join(ROOT, "jobspecs", name + ".yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        made.append(path)
    yield
    for path in made:
        os.unlink(path)


@pytest.mark.parametrize("extra,field", BAD_INPUTS, ids=[" ".join(e)[:40] for e, _ in BAD_INPUTS])
def test_bad_input_fails_naming_the_field_and_creates_nothing(bad_spec_files, extra, field):
    before_dirs, before_jobs = set(os.listdir(RECORDS)), set(ray_jobs())
    args = [] if any(e.startswith("spec=") for e in extra) else ["-e", "spec=smoke"]
    for e in extra:
        args += ["-e", e]
    run = playbook("submit.yml", *args)
    assert run.rc != 0, run
    # A -e knob the play reads itself (spec, submission_id: plugin_utils/knobs.py) is refused before the spec is
    # resolved, in its own words; every other field by the JobSpec's. Either line names the field.
    named = (f"jobspec field '{field}", f"-e: {field}: ") if field != "-e" else ("-e: must be key=value",)
    assert any(words in run.out for words in named), run
    assert set(os.listdir(RECORDS)) == before_dirs
    assert set(ray_jobs()) == before_jobs


def test_job_waiting_for_a_missing_resource_is_stopped_after_the_pending_timeout():
    sid = new_id("pending")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "wait=true",
                   "-e", '{"resources": {"entrypoint_resources": {"worker_node": 1, "no_such_gpu": 1}}}',
                   "-e", "timeouts.pending_s=5")
    assert run.rc != 0
    assert "PENDING_TIMEOUT" in run.out
    st = status(sid)
    assert st["state"] == "FAILED" and st["reason"] == "PENDING_TIMEOUT" and st["final"]
    assert st["ray_status"] in ("PENDING", "STOPPED"), st
    assert "Node status" in read(sid, "debug", "ray_status_post.txt")
    assert "PENDING_TIMEOUT" in read(sid, "debug", "failure.txt")
    assert st["diagnosis"]["kind"] == "resources_pending" and st["diagnosis"]["hint"], st["diagnosis"]
    assert os.path.exists(record(sid, "debug", "nodes.json"))


def test_stop_status_and_logs_of_a_running_job():
    sid = start_long_job("stop", "echo started-long-job; sleep 300")
    # RUNNING comes before the driver's first line reaches the log: wait for the line itself.
    wait_for(lambda: "started-long-job" in ray_logs(sid), 60, f"{sid}'s first log line")
    logs = playbook("job.yml", "-e", f"id={sid}", "-e", "do=logs")
    assert logs.rc == 0 and "started-long-job" in logs.out, logs
    stop = playbook("job.yml", "-e", f"id={sid}", "-e", "do=stop")
    assert stop.rc == 0 and stop.changed("lab-head") == 1, stop
    st = status(sid)
    assert st["final"] and st["state"] == "STOPPED" and st["reason"] == "STOPPED_BY_USER"
    again = playbook("job.yml", "-e", f"id={sid}", "-e", "do=stop")
    assert again.rc == 0 and again.changed("lab-head") == 0
    unknown = playbook("job.yml", "-e", "id=it-never-submitted", "-e", "do=status")
    assert unknown.rc != 0 and "no job record" in unknown.out


def test_concurrent_submissions_land_once_per_id():
    a, b = new_id("conc"), new_id("conc")
    same = new_id("same")
    args = [(a,), (b,), (same,), (same,)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda sid: playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid[0]}"),
                             args))
    assert runs[0].rc == 0 and runs[1].rc == 0, runs
    assert os.path.isdir(record(a)) and os.path.isdir(record(b))
    outcomes = sorted("already existed" in r.out for r in runs[2:])
    assert [r.rc for r in runs[2:]] == [0, 0] and outcomes == [False, True], runs[2:]
    # Each landed once: in Ray, or QUEUED while the lab's two workers (a driver each) run others; followed to the end.
    jobs = ray_jobs()
    assert all(sid in jobs or status(sid)["state"] == "QUEUED" for sid in (a, b, same)), (set(jobs), a, b, same)
    for sid in (a, b, same):
        playbook("job.yml", "-e", f"id={sid}", "-e", "do=wait")
        assert status(sid)["state"] == "SUCCEEDED"


# Secrets of awkward shapes (quotes, $, spaces, backslashes, unicode), as people's tokens are.
SECRETS = {"WANDB_API_KEY": "wandb-sekrit-5f1c2b9e", "HF_TOKEN": "hf_'sek\"rit $HOME 8d7e",
           "MY_PASSWORD": "two words sekrit ✓", "DB_SECRET": "back\\slash{{ sekrit }}"}


def test_no_secret_lands_in_the_record_or_the_vvv_output():
    sid = new_id("secret")
    env = json.dumps({"env": SECRETS})
    run = playbook("submit.yml", "-vvv", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "wait=true",
                   "-e", env)
    assert run.rc == 0, run
    assert "<redacted>" in run.out  # -vvv shows the module's (redacted) arguments
    with open(TOKEN) as handle:
        token = handle.read().strip()
    for secret in [*SECRETS.values(), token]:
        for shape in {secret, json.dumps(secret)[1:-1]}:
            assert shape not in run.out, secret[:6]
            for folder, _, files in os.walk(record(sid)):
                for name in files:
                    with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                        assert shape not in handle.read(), (name, secret[:6])
    runtime_env = json.loads(read(sid, "config", "runtime_env.json"))["env_vars"]
    assert all(runtime_env[name] == "<redacted>" for name in SECRETS)


def test_worker_killed_during_a_job_is_recorded_as_failed_with_a_snapshot():
    sid = start_long_job("killed", "sleep 600")
    driver_id = ray_jobs()[sid].driver_node_id
    ip = next(n["node_ip"] for n in nodes() if n["node_id"] == driver_id)
    host = next(h for h, i in IPS.items() if i == ip)
    ssh(host, "kill -9 $(pgrep -x raylet)")
    waited = playbook("job.yml", "-e", f"id={sid}", "-e", "do=wait")
    assert waited.rc == 0, waited
    st = status(sid)
    assert st["state"] == "FAILED" and st["error_type"], st
    assert st["diagnosis"]["kind"] == "node_died", st["diagnosis"]
    assert os.path.exists(record(sid, "debug", "nodes.json")) and "FAILED" in read(sid, "debug", "failure.txt")
    healed = playbook("up.yml")
    assert healed.rc == 0, healed
    # Ray may leave the driver of a job whose node died running (notes/ray.md); down.yml ends it.
    orphaned = "sleep 600" in ssh(host, "ps -eo args=")
    down = playbook("down.yml")
    assert down.rc == 0, down
    if orphaned:
        assert re.search(r"orphaned drivers ended: [1-9]", down.out), down
    assert "sleep 600" not in ssh(host, "ps -eo args=")


def test_an_import_error_is_diagnosed_with_its_evidence():
    # The killed-worker test ends with down.yml: bring the cluster back first.
    assert playbook("up.yml").rc == 0
    sid = new_id("importerr")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                   "-e", 'entrypoint="python -c \'import verl_no_such_module\'"', "-e", "wait=true")
    assert run.rc != 0
    diagnosis = status(sid)["diagnosis"]
    assert diagnosis["kind"] == "import_error", diagnosis
    assert diagnosis["evidence"]["file"] == "logs/driver.log"
    assert "No module named 'verl_no_such_module'" in diagnosis["evidence"]["line"]


def test_a_submit_interrupted_at_each_step_is_completed_by_the_same_command():
    # Killed after the record's directory was made, before Ray had the job: the same command submits it.
    early = new_id("interrupted")
    os.makedirs(record(early, "config"))
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={early}", "-e", "wait=true")
    assert run.rc == 0 and status(early)["state"] == "SUCCEEDED", run
    # Killed after Ray accepted the job, before status.json: the same command finishes the record only.
    late = new_id("interrupted")
    assert playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={late}").rc == 0
    os.unlink(record(late, "status.json"))
    again = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={late}", "-e", "wait=true")
    assert again.rc == 0 and "record of an interrupted submit completed" in again.out, again
    st = status(late)
    assert st["state"] == "SUCCEEDED" and st["resumed"] and list(ray_jobs()).count(late) == 1


def test_a_lost_status_json_mid_run_never_stops_the_job():
    sid = start_long_job("lost", "sleep 600")
    os.unlink(record(sid, "status.json"))
    shown = playbook("job.yml", "-e", f"id={sid}")
    assert shown.rc == 0, shown
    assert ray_jobs()[sid].status.value == "RUNNING" and status(sid)["rebuilt"]
    stopped = playbook("job.yml", "-e", f"id={sid}", "-e", "do=stop")
    assert stopped.rc == 0 and status(sid)["state"] == "STOPPED", stopped


def test_a_wrong_token_is_one_line_naming_the_token_file():
    sid = new_id("token")
    assert playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "wait=true").rc == 0
    ssh(HEAD, "umask 077; printf '%064d' 0 > /root/wrong_token")
    run = playbook("job.yml", "-e", f"id={sid}", "-e", "ray_auth_token_path=/root/wrong_token")
    assert run.rc != 0 and "refused the token from /root/wrong_token" in run.out, run
    assert "0" * 64 not in run.out and "Traceback" not in run.out


def test_a_head_without_the_shared_root_mounted_submits_nothing():
    ssh(HEAD, "umount -l /private")  # the lab host's /private is then the machine's own empty directory
    try:
        sid = new_id("nomount")
        run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}")
        assert run.rc != 0 and "shared_root: /private on this head is not the shared storage" in run.out, run
        assert sid not in ray_jobs() and not os.path.exists(record(sid))
        assert ssh(HEAD, "ls -A /private").strip() == ""  # nothing written onto the head's own disk
    finally:
        healed = playbook("up.yml")
    assert healed.rc == 0 and healed.changed(HEAD) >= 1, healed
    sid = new_id("remounted")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "wait=true")
    assert run.rc == 0 and status(sid)["state"] == "SUCCEEDED", run
