"""The JSON Schema of a job record's status.json (job_status.schema.json), derived from module_utils/jobs/status.py.

  .venv/bin/python -m plugin_utils.record_schema --write-schema job_status.schema.json

Dashboards and a site's scripts read records with it; a unit test checks the file matches the model.
"""

import argparse
import json

from plugin_utils import PROJECT_ROOT  # noqa: F401 - the bootstrap: module_utils under ansible.module_utils

from ansible.module_utils.jobs.status import json_schema  # isort: skip


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def _main(argv=None):
    parser = argparse.ArgumentParser(description="Write the JSON Schema of a job record's status.json.")
    parser.add_argument("--write-schema", metavar="PATH", required=True)
    args = parser.parse_args(argv)
    with open(args.write_schema, "w", encoding="utf-8") as handle:
        handle.write(schema_text())


if __name__ == "__main__":
    _main()
