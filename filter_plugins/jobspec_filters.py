"""Filters that turn `-e spec=NAME [-e key=value ...]` into a resolved JobSpec (module_utils/jobspec.py)."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))
import jobspec

# Extra vars that steer the playbooks rather than describe the job.
PLAYBOOK_KNOBS = frozenset({"spec", "wait", "force", "id", "do", "preflight", "wait_budget_s", "suite", "state", "tail_lines"})
# Inventory-style variables a user may pass with -e; they are not JobSpec fields.
_KNOWN_PREFIXES = ("ansible_", "ray_", "shared_root_", "jobspec_", "code_snapshot_", "regression_")


def cli_extra_vars():
    """The -e values of this ansible-playbook run, parsed as Ansible parses them."""
    from ansible import context
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.vars import load_extra_vars

    if not context.CLIARGS.get("extra_vars"):
        return {}
    return dict(load_extra_vars(DataLoader()))


def spec_overrides(extra_vars):
    """The -e values that are JobSpec fields; the rest steer the playbook or the inventory."""
    if "_raw_params" in extra_vars:
        # Ansible splits `-e key=two words` at the space and keeps the rest here.
        raise jobspec.JobSpecError("-e", "is not key=value; quote a value with spaces, e.g. "
                                   "-e 'entrypoint=\"echo hi\"'", extra_vars["_raw_params"])
    return {k: v for k, v in extra_vars.items()
            if k not in PLAYBOOK_KNOBS and not k.startswith(_KNOWN_PREFIXES)}


def site_layer(site_defaults, workload):
    """The inventory's defaults for one workload: `all`, then `trainers` (ppo/grpo/sft), then its own."""
    layer = {}
    keys = ["all"] + (["trainers"] if workload in jobspec.TRAINERS else []) + [workload]
    for key in keys:
        part = (site_defaults or {}).get(key) or {}
        if not isinstance(part, dict):
            raise jobspec.JobSpecError(f"jobspec_defaults.{key}", "must be a mapping of jobspec fields", part)
        layer = jobspec.merge_layers(layer, part)
    return layer


def jobspec_resolve(name, ray_config, specs_dir, site_defaults=None, extra_vars=None):
    """Load jobspecs/<name>.yaml, merge site defaults < file < -e, validate: a JobSpec dict.

    Raises one line naming the bad field and value; nothing has been submitted or created then.
    """
    try:
        raw = cli_extra_vars() if extra_vars is None else dict(extra_vars)
        cli = jobspec.coerce_cli_overrides(spec_overrides(raw))
        path = jobspec.find_spec_file(str(name), specs_dir)
        spec_file = jobspec.load_spec_file(path)
        workload = cli.get("workload", spec_file.get("workload"))
        spec = jobspec.resolve(spec_file, name=str(name), ray_config=dict(ray_config),
                               site_defaults=site_layer(site_defaults, workload), cli=cli)
    except jobspec.JobSpecError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return spec.to_dict()


def jobspec_render(spec, ray_config):
    """What would be submitted: entrypoint, runtime_env and the equivalent `ray job submit` (redacted)."""
    config = jobspec.RayConfig.from_dict(dict(ray_config))
    runtime_env = jobspec.render_runtime_env(spec, config)
    rendered = {"entrypoint": jobspec.render_entrypoint(spec, config), "runtime_env": runtime_env,
                "entrypoint_options": jobspec.entrypoint_options(spec),
                "submit_cmd": jobspec.submit_command(spec, config, runtime_env)}
    return jobspec.redact(rendered, tuple(config.secret_env_names))


class FilterModule:
    def filters(self):
        return {"jobspec_resolve": jobspec_resolve, "jobspec_render": jobspec_render}
