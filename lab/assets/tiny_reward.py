"""The rule-based reward of the lab's tiny PPO/GRPO task (verl's custom_reward_function, name compute_score).

make_tiny_assets.py copies this file next to the tiny data set (reward/tiny_reward.py), so a job names it by a
path on the shared root. The score is the F1 of character bigrams between the response and the expected answer:
a random tiny model scores a little above zero and differently for every sample, so GRPO's group advantages are
not all zero, and it rises smoothly as the model learns the answers' spelling. Standard library only.
"""

from __future__ import annotations

from collections import Counter

END_MARKERS = ("<|im_end|>", "<|endoftext|>")


def bigrams(text: str) -> Counter:
    """Character bigrams of text, lower-cased, with runs of whitespace folded to one space."""
    folded = " ".join(text.lower().split())
    return Counter(folded[i:i + 2] for i in range(len(folded) - 1))


def bigram_f1(response: str, answer: str) -> float:
    """F1 of the bigram multisets: 1.0 for the answer itself, 0.0 when nothing is shared."""
    got, want = bigrams(response), bigrams(answer)
    shared = sum((got & want).values())
    if not shared:
        return 0.0
    precision, recall = shared / sum(got.values()), shared / sum(want.values())
    return 2 * precision * recall / (precision + recall)


def strip_response(solution_str: str) -> str:
    """The response up to the first end-of-turn marker (decoded responses may keep special tokens)."""
    for marker in END_MARKERS:
        solution_str = solution_str.split(marker, 1)[0]
    return solution_str


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl's reward function signature: the score of one response."""
    return bigram_f1(strip_response(str(solution_str)), str(ground_truth))
