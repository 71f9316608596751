"""lookup_plugins/regression_suite.py: a suite's entries as a playbook shows them, their secrets redacted. The
lookup runs as Ansible loads it (lookup_loader, from ansible.cfg's lookup_plugins)."""

import json

from suite_files import SECRET_SUITE, write


def test_the_lookup_shows_entries_with_their_secrets_redacted(tmp_path):
    from ansible.plugins.loader import lookup_loader

    write(tmp_path, "s", SECRET_SUITE)
    lookup = lookup_loader.get("regression_suite")
    [entry] = lookup.run(["s"], variables={}, suites_dir=str(tmp_path))
    assert entry["overrides"] == {"env": {"WANDB_API_KEY": "<redacted>", "PLAIN": "keep"},
                                  "env.HF_TOKEN": "<redacted>", "total_training_steps": 2}
    assert "sekrit" not in json.dumps(entry)


def test_the_lookup_hides_the_same_names_as_ray_job(tmp_path):
    """One rule for which names are secret (redaction.secret_names): ray_config's list, then the site's extra ones."""
    from ansible.plugins.loader import lookup_loader

    write(tmp_path, "s", "entries:\n  - name: a\n    spec: smoke\n"
                         "    overrides: {env: {SITE_CODE: s-1, OTHER_CODE: s-2, PLAIN: keep}}\n")
    variables = {"ray_config": {"secret_env_names": ["SITE_CODE"]}, "jobspec_secret_env_names": ["OTHER_CODE"]}
    [entry] = lookup_loader.get("regression_suite").run(["s"], variables=variables, suites_dir=str(tmp_path))
    assert entry["overrides"]["env"] == {"SITE_CODE": "<redacted>", "OTHER_CODE": "<redacted>", "PLAIN": "keep"}


def test_an_env_given_as_json_text_is_shown_redacted_whole(tmp_path):
    from ansible.plugins.loader import lookup_loader

    write(tmp_path, "s", "entries:\n  - name: a\n    spec: smoke\n"
                         "    overrides: {env: '{\"WANDB_API_KEY\": \"suite-sekrit-1234\"}'}\n")
    [entry] = lookup_loader.get("regression_suite").run(["s"], variables={}, suites_dir=str(tmp_path))
    assert entry["overrides"] == {"env": "<redacted>"}
