"""A job's first step on the worker: which verl does this job import, and is it the chosen snapshot?

Run as `python -m job_preflight --code-path PATH --out FILE` from a code snapshot (its folder is first
on PYTHONPATH). Prints verl.__file__, verl.__version__ and the snapshot's marker, writes them to FILE,
and exits non-zero when verl was not imported from PATH, before any GPU time is spent.

FILE is in the job's record (<shared_root>/jobs/<submission_id>/), whose name is the id the command was rendered
for. A record's config/submit_cmd.txt pasted with the id replaced everywhere is a new job whose record folder
nobody made yet: it is made here (the trainer's checkpoints, metrics and event files go there too). Pasted with only
--submission-id changed, every path of the command still names the other job's record, whose checkpoints verl would
resume from and write over: that is refused before anything is written, with the command that replays it.
"""

import argparse
import json
import os
import sys

# Ray 2.60 gives a job's driver its submission id only inside the job's config (the job supervisor's
# _get_driver_env_vars): {"runtime_env": ..., "metadata": {"job_submission_id": <id>, ...}}.
RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def own_submission_id(environ=None):
    """The submission id Ray runs this job under, or None outside a Ray job (or a config without one)."""
    text = (os.environ if environ is None else environ).get(RAY_JOB_CONFIG)
    try:
        metadata = json.loads(text).get("metadata") if text else None
    except (ValueError, AttributeError):
        return None
    sid = metadata.get("job_submission_id") if isinstance(metadata, dict) else None
    return sid if isinstance(sid, str) and sid else None


def replay_problem(out, own):
    """None, or why this job may not write under the record `out` is in: it runs under another submission id."""
    record = os.path.dirname(os.path.abspath(out))
    rendered = os.path.basename(record)
    if own is None or own == rendered:
        return None
    return (f"preflight: FAILED: this job runs as {own} but its command's paths are the record of {rendered} "
            f"({record}), whose checkpoints it would resume from and write over: replay a record's command with the "
            f"id replaced everywhere: sed 's/{rendered}/{own}/g' {record}/config/submit_cmd.txt | bash")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--code-path", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    problem = replay_problem(args.out, own_submission_id())
    if problem:
        print(problem, file=sys.stderr)
        return 4

    import verl

    try:
        import verl_code_marker as marker
    except ImportError:
        marker = None
    code_path = os.path.realpath(args.code_path)
    verl_file = os.path.realpath(verl.__file__)
    report = {
        "code_path": args.code_path,
        "verl_file": verl_file,
        "verl_version": getattr(verl, "__version__", None),
        "code_id": getattr(marker, "CODE_ID", None),
        "code_digest": getattr(marker, "DIGEST", None),
        "marker_file": os.path.realpath(marker.__file__) if marker else None,
        "ok": verl_file.startswith(code_path + os.sep),
    }
    for key in ("verl_file", "verl_version", "code_id", "marker_file"):
        print(f"preflight: {key} = {report[key]}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)  # a replay's record: see the docstring
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
    os.replace(tmp, args.out)
    if not report["ok"]:
        print(f"preflight: FAILED: verl was imported from {verl_file}, not from the chosen code path "
              f"{args.code_path}", file=sys.stderr)
        return 3
    print("preflight: ok, verl comes from the chosen code path")
    return 0


if __name__ == "__main__":
    sys.exit(main())
