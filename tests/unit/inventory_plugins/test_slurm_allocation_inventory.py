"""inventory_plugins/slurm_allocation.py: a Slurm allocation as the cluster's inventory, the plugin run in the real
ansible-inventory with a scontrol that prints the lab's real answers (tests/unit/data/slurm/)."""

import json
import os
import subprocess
import sys

from slurm_harness import JOB, fake_scontrol, read

from plugin_utils import PROJECT_ROOT, slurm

ROOT = PROJECT_ROOT


def site(tmp_path, job_text):
    """An inventory folder whose slurm.yml asks a scontrol that answers like the lab's Slurm."""
    scontrol = tmp_path / "scontrol"
    (tmp_path / "job.txt").write_text(job_text)
    (tmp_path / "node.txt").write_text(read("show_node_o.txt"))
    scontrol.write_text(f"""#!/bin/sh
case "$1 $2" in
  "show job") cat {tmp_path}/job.txt ;;
  "show node") cat {tmp_path}/node.txt ;;
  "show hostnames") echo lab-worker1; echo lab-worker2 ;;
esac
""")
    scontrol.chmod(0o755)
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "slurm.yml").write_text(f"plugin: slurm_allocation\nscontrol: {scontrol}\n")
    (inv / "group_vars" / "ray_cluster.yml").write_text("ray_worker_num_gpus: 99\nsite_setting: kept\n")
    return inv


def inventory(inv, **env):
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-inventory"), "-i", str(inv),
                           "--list"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=60,
                          env={k: v for k, v in dict(os.environ, **env).items() if v is not None})
    return proc.returncode, json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr


def test_ansible_inventory_makes_the_allocation_a_cluster(tmp_path):
    rc, doc = inventory(site(tmp_path, read("show_job_d.txt")), SLURM_JOB_ID=JOB)
    assert rc == 0, doc
    assert doc["ray_head"]["hosts"] == ["lab-worker1"] and doc["ray_workers"]["hosts"] == ["lab-worker2"]
    assert sorted(doc["ray_cluster"]["children"]) == ["ray_head", "ray_workers"]
    worker = doc["_meta"]["hostvars"]["lab-worker2"]
    # Slurm's count wins over the site's group_vars; the site's other settings stay.
    assert worker["ray_worker_num_gpus"] == 3 and worker["site_setting"] == "kept"
    # What Slurm said is data, never a template: Ansible keeps it marked unsafe.
    assert worker["ansible_host"] == {"__ansible_unsafe": "198.18.0.12"}
    assert worker["slurm_job_id"] in (JOB, {"__ansible_unsafe": JOB})


def test_ansible_inventory_fails_in_one_line_outside_an_allocation(tmp_path):
    rc, err = inventory(site(tmp_path, read("show_job_d.txt")), SLURM_JOB_ID=None)
    assert rc != 0 and "slurm_allocation: job_id: no Slurm job id (run inside an allocation" in err


def test_ansible_inventory_uses_the_pinned_allocation(tmp_path):
    # Slurm now says one node (the job is completing), the batch script pinned both.
    pinned = slurm.allocation(JOB, fake_scontrol(read("show_job_d.txt"))).to_json()
    inv = site(tmp_path, read("show_job_d.txt").replace("JobState=RUNNING", "JobState=COMPLETED"))
    rc, doc = inventory(inv, SLURM_JOB_ID=JOB, **{slurm.PINNED_ENV: pinned})
    assert rc == 0 and doc["ray_workers"]["hosts"] == ["lab-worker2"], doc
    rc, err = inventory(inv, SLURM_JOB_ID=JOB)
    assert rc != 0 and "is COMPLETED, not RUNNING" in err
