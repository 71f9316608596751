"""A job's first step on the worker: which verl does this job import, and is it the chosen snapshot?

Run as `python -m job_preflight --code-path PATH --out FILE` from a code snapshot (its folder is first
on PYTHONPATH). Prints where verl is imported from, its version and the snapshot's marker, writes them to FILE,
and exits non-zero when verl was not imported from PATH, before any GPU time is spent.

FILE is in the job's record (<shared_root>/jobs/<submission_id>/), whose name is the id the command was rendered
for. A record's config/submit_cmd.txt pasted with the id replaced everywhere is a new job whose record folder
nobody made yet: it is made here (the trainer's checkpoints, metrics and event files go there too). Pasted with only
--submission-id changed, every path of the command still names the other job's record, whose checkpoints verl would
resume from and write over: that is refused before anything is written, with the command that replays it.
"""

import argparse
import importlib.util
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


def verl_version(verl_file):
    """verl's __version__ as its __init__ sets it: the text of verl/version/version beside it (None without one)."""
    try:
        with open(os.path.join(os.path.dirname(verl_file), "version", "version"), encoding="utf-8") as handle:
            return handle.read(64).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--code-path", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    problem = replay_problem(args.out, own_submission_id())
    if problem:
        print(problem, file=sys.stderr)
        return 4

    # Where `import verl` would load it from, found as the import system finds it but without running verl's
    # __init__: that imports torch and tensordict, about 8 s of a small job's CPU, and the trainer that follows is
    # a process of its own that imports verl again anyway.
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        print("preflight: FAILED: verl is not importable from this job's Python path", file=sys.stderr)
        return 3
    try:
        import verl_code_marker as marker
    except ImportError:
        marker = None
    code_path = os.path.realpath(args.code_path)
    verl_file = os.path.realpath(spec.origin)
    report = {
        "code_path": args.code_path,
        "verl_file": verl_file,
        "verl_version": verl_version(verl_file),
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
