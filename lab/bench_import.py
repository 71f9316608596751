#!/usr/bin/env python3
"""Measure what import.yml's reader costs on scripts built to be slow (issue 39): each case is made at its size (the
issue's, then the 1 MiB input cap), read and imported (plugin_utils/verl_import.convert: nothing of it runs), and
timed; each figure is printed beside the same case at a tenth of its size, so a time that grows faster than the input
shows (a linear reader takes about ten times as long for ten times the input). No lab needed: control-host code.

Usage: .venv/bin/python lab/bench_import.py [--repeat 3]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import verl_import
from plugin_utils.verl_script import MAX_BYTES, ScriptError

TRAINER = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=/d/t.parquet"


def fill(size, make_line, head=(), tail=""):
    """Lines make_line(0), make_line(1)... after head, up to size bytes with the tail: (text, lines made)."""
    lines, total, n = list(head), sum(len(h) + 1 for h in head) + len(tail) + 1, 0
    while True:
        line = make_line(n)
        if total + len(line) + 1 > size:
            return "\n".join([*lines, tail.format(last=n - 1)]) + "\n"
        lines.append(line)
        total += len(line) + 1
        n += 1


def assignments_and_sources(size):
    """NAME=value lines each followed by a `source` (which may change every value), then the trainer using them."""
    return fill(size, lambda n: f"V{n}=/p/{n}\nsource ./env.sh", tail=TRAINER + " a.b=$V0 c.d=$V{last}")


def one_word(size):
    """One override whose value is a single plain word of about `size` bytes."""
    return f"{TRAINER} x.y={'a' * (size - len(TRAINER) - 10)}\n"


def one_quoted_word(size):
    """One word of about `size` bytes that changes quoting every few characters: 'cd'"ef"\\g."""
    chunk = "ab'cd'\"ef\"\\g"
    return f"{TRAINER} x.y={chunk * ((size - len(TRAINER) - 10) // len(chunk))}\n"


def bangs(size):
    """A run of `!` words (pipeline negations) before a command, then the trainer."""
    return "! " * ((size - len(TRAINER) - 10) // 2) + "true\n" + TRAINER + "\n"


def one_bang_word(size):
    """A run of `!` as one word."""
    return "!" * (size - len(TRAINER) - 10) + "\n" + TRAINER + "\n"


def arrays_and_branches(size):
    """Array items appended in branches the reader cannot decide, then handed to the trainer."""
    return fill(size, lambda n: f'if [ "$D" = x{n} ]; then A+=(k{n}.v=1); fi', head=("D=$(probe)", "A=(a.b=1)"),
                tail=TRAINER + ' "${{A[@]}}"')


def defaults_and_arithmetic(size):
    """${NAME:-default} and $((...)) on every line, each over the line before."""
    return fill(size, lambda n: f"N{n + 1}=$((N{n} + ${{X{n}:-1}}))", head=("N0=${N0:-1}",),
                tail=TRAINER + " n.v=$N{last}")


# The issue's own cases (issue 39: 53 s, 40 s and over 60 s before), then each kind at the 1 MiB cap.
CASES = {"3,000 assignments and source lines": (assignments_and_sources, 50_000),
         "a 1 MB word": (one_word, 1_000_000), "a 320 KB run of ! words": (bangs, 320_000),
         "a 320 KB ! word": (one_bang_word, 320_000)}
CASES.update({f"{name} (1 MiB)": (make, MAX_BYTES) for name, make in (
    ("assignments and source lines", assignments_and_sources), ("one word changing quotes", one_quoted_word),
    ("a run of ! words", bangs), ("array items in undecided branches", arrays_and_branches),
    ("chained defaults and arithmetic", defaults_and_arithmetic))})


def timed(text, repeat):
    best, outcome = None, None
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            imported = verl_import.convert(text, "bench.sh")
            outcome = f"imported ({len(imported.spec['overrides'])} overrides, {len(imported.lines)} report lines)"
        except ScriptError as err:
            outcome = f"refused: {str(err)[:90]}"
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best, outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the fastest is printed")
    args = parser.parse_args()
    for name, (make, size) in CASES.items():
        big, small = make(size), make(size // 10)
        assert len(big.encode()) <= MAX_BYTES, name
        t_big, outcome = timed(big, args.repeat)
        t_small, _ = timed(small, args.repeat)
        print(f"{name}: {len(big.encode()) / 1e6:.2f} MB in {t_big:.2f} s; a tenth of it in {t_small:.3f} s "
              f"(x{t_big / t_small:.1f}); {outcome}")


if __name__ == "__main__":
    main()
