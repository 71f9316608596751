"""Inventory plugin: the nodes of a Slurm allocation as ray_head and ray_workers."""

DOCUMENTATION = r"""
name: slurm_allocation
short_description: The nodes of a running Slurm job as this project's Ray cluster
description:
  - Reads a running Slurm job with C(scontrol show job -d) and expands its node lists with
    C(scontrol show hostnames). The first node becomes the only host of C(ray_head) (it runs Ray with
    0 CPUs and 0 GPUs), the others C(ray_workers); both are children of C(ray_cluster).
  - Each worker's C(ray_worker_num_gpus) is the number of GPUs the job holds on it (its C(gpu) GRES),
    and each node's C(ansible_host) is its Slurm C(NodeAddr) when that differs from its name.
  - The job is O(job_id), or the allocation the command runs in (C(SLURM_JOB_ID)).
  - When C(VERL_RAY_SLURM_ALLOCATION) holds this job's allocation (scripts/slurm_batch.py sets it from what it
    read when it started), that is used instead. A cancelled job's node list shrinks while it completes, and
    Ray must still be stopped on every node.
  - The config file's name must end in C(slurm.yml) or C(slurm.yaml); everything else of the site
    (users, keys, the shared root) comes from the inventory folder's group_vars as usual.
options:
  plugin:
    description: Marks the file as this plugin's.
    required: true
    choices: [slurm_allocation]
  job_id:
    description: The Slurm job whose nodes make the cluster.
    type: str
    env:
      - name: SLURM_JOB_ID
  scontrol:
    description: The scontrol command to ask Slurm with.
    type: str
    default: scontrol
"""

EXAMPLES = r"""
# inventory/<site>/slurm.yml, beside inventory/<site>/group_vars/:
plugin: slurm_allocation
# Then, inside an allocation (salloc, or an sbatch script):
#   ansible-playbook -i inventory/<site> up.yml
#   ansible-playbook -i inventory/<site> submit.yml -e spec=sft
"""

import os
import sys

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import slurm


class InventoryModule(BaseInventoryPlugin):
    NAME = "slurm_allocation"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("slurm.yml", "slurm.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        try:
            job_id = self.get_option("job_id")
            alloc = slurm.pinned(job_id, os.environ[slurm.PINNED_ENV]) if os.environ.get(slurm.PINNED_ENV) else None
            alloc = alloc or slurm.allocation(job_id, slurm.scontrol_runner(self.get_option("scontrol")))
        except slurm.SlurmError as exc:
            raise AnsibleParserError(f"slurm_allocation: {exc}") from None
        for group in ("ray_cluster", "ray_head", "ray_workers"):
            self.inventory.add_group(group)
        self.inventory.add_child("ray_cluster", "ray_head")
        self.inventory.add_child("ray_cluster", "ray_workers")
        for node, host_vars in slurm.inventory_vars(alloc).items():
            self.inventory.add_host(node, group="ray_head" if node == alloc.head else "ray_workers")
            for key, value in host_vars.items():
                self.inventory.set_variable(node, key, value)
