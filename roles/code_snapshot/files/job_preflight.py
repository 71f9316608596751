"""A job's first step on the worker: which verl does this job import, and is it the chosen snapshot?

Run as `python -m job_preflight --code-path PATH --out FILE` from a code snapshot (its folder is first
on PYTHONPATH). Prints verl.__file__, verl.__version__ and the snapshot's marker, writes them to FILE,
and exits non-zero when verl was not imported from PATH, before any GPU time is spent.
"""

import argparse
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--code-path", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

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
