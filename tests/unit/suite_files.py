"""Suite files written for a test, shared by the tests that read suites: load_suite and suite_entry
(scripts/test_regression_suite.py) and the regression_suite lookup (lookup_plugins/test_regression_suite_lookup.py)."""


def write(tmp_path, name, text):
    (tmp_path / f"{name}.yaml").write_text(text)


SECRET_SUITE = ("entries:\n"
                "  - name: a\n    spec: smoke\n"
                "    overrides: {env: {WANDB_API_KEY: suite-sekrit-1234, PLAIN: keep}, env.HF_TOKEN: hf-sekrit-5678,"
                " total_training_steps: 2}\n")
