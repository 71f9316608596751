"""The project's published JSON Schemas, each generated from its model; unit tests check the files match.

  .venv/bin/python -m plugin_utils.schemas      # rewrites them all

jobspec.schema.json: a spec file (module_utils/jobspec/fields.py SPEC_FIELDS, through plugin_utils/jobspec_schema.py).
job_status.schema.json: a job record's status.json (module_utils/jobs/status.py FIELDS), for dashboards and a
site's scripts that read records.
"""

import json
import os

from plugin_utils import PROJECT_ROOT, jobspec_schema

from ansible.module_utils.jobs import status  # isort: skip

SCHEMAS = {"jobspec.schema.json": jobspec_schema.json_schema, "job_status.schema.json": status.json_schema}


def schema_text(name) -> str:
    return json.dumps(SCHEMAS[name](), indent=2) + "\n"


def _main():
    for name in SCHEMAS:
        with open(os.path.join(PROJECT_ROOT, name), "w", encoding="utf-8") as handle:
            handle.write(schema_text(name))
        print(f"wrote {name}")


if __name__ == "__main__":
    _main()
