"""module_utils/verl/checkpoints.py: the newest whole checkpoint, on folders laid out as verl 0.9.1 saves them."""

import os

import pytest
from ansible.module_utils.verl import checkpoints as ck
from blocking import within


def save(root, step, world=2, ranks=None, sub="", kinds=("model", "optim", "extra_state"), track=True):
    """A global_step_<step> folder as verl writes it (then the tracker, unless the save was cut short)."""
    folder = root / f"global_step_{step}" / sub if sub else root / f"global_step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    for kind in kinds:
        for rank in range(world) if ranks is None else ranks:
            (folder / f"{kind}_world_size_{world}_rank_{rank}.pt").write_bytes(b"x")
    (root / f"global_step_{step}" / "data_0.pt").write_bytes(b"d")
    if track:
        (root / ck.TRACKER).write_text(str(step))


def test_the_newest_whole_step_wins(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    found = ck.newest_whole([str(tmp_path)], 2)
    assert found["step"] == 2 and found["path"] == str(tmp_path / "global_step_2") and found["skipped"] == []


def test_a_step_missing_a_shard_is_skipped(tmp_path):
    save(tmp_path, 2)
    save(tmp_path, 3, ranks=[0])  # rank 1's files never arrived (the node died), yet the tracker says 3
    found = ck.newest_whole([str(tmp_path)], 2)
    assert found["step"] == 2 and "lacks rank(s) 1 of 2" in found["skipped"][0][1]


def test_a_step_newer_than_the_tracker_is_an_unfinished_save(tmp_path):
    save(tmp_path, 2)
    save(tmp_path, 3, track=False)
    found = ck.newest_whole([str(tmp_path)], 2)
    assert found["step"] == 2 and "its save did not finish" in found["skipped"][0][1]


def test_actor_and_critic_shards_must_all_be_there(tmp_path):
    save(tmp_path, 4, sub="actor")
    save(tmp_path, 4, sub="critic", ranks=[1])
    save(tmp_path, 2, sub="actor")
    save(tmp_path, 2, sub="critic")
    (tmp_path / ck.TRACKER).write_text("4")
    found = ck.newest_whole([str(tmp_path)], 2)
    assert found["step"] == 2 and "critic/extra_state lacks rank(s) 0 of 2" in found["skipped"][0][1]


def test_the_newest_over_a_job_and_its_attempts(tmp_path):
    first, retry = tmp_path / "a", tmp_path / "b"
    save(first, 2)
    save(retry, 5)
    assert ck.newest_whole([str(first), str(retry)], 2)["path"] == str(retry / "global_step_5")


def test_another_world_size_is_refused_with_a_message_that_says_so(tmp_path):
    save(tmp_path, 2, world=4)
    with pytest.raises(ck.CheckpointError, match=r"no checkpoint at world size 2 .*saved at world size 4, this job "
                                                 r"runs at 2\); resume refused"):
        ck.newest_whole([str(tmp_path)], 2)


def test_nothing_to_resume_from(tmp_path):
    with pytest.raises(ck.CheckpointError, match="no checkpoint to resume from in"):
        ck.newest_whole([str(tmp_path / "none")], 2)
    save(tmp_path, 1, ranks=[1])
    with pytest.raises(ck.CheckpointError, match=r"no whole checkpoint to resume from \(global_step_1 .*lacks rank"):
        ck.newest_whole([str(tmp_path)], 2)


def test_a_kind_of_shard_lost_whole_is_noticed_against_the_other_checkpoints(tmp_path):
    save(tmp_path, 2, world=1)
    save(tmp_path, 3, world=1)
    (tmp_path / "global_step_3" / "model_world_size_1_rank_0.pt").unlink()  # world size 1: the kind is gone
    found = ck.newest_whole([str(tmp_path)], 1)
    assert found["step"] == 2 and found["skipped"][0][1] == "lacks model (the other checkpoints have it)"


# ---------------------------------------------------------------- the share is data of any shape (issue 22, class 3)


def test_a_symlinked_step_outside_the_checkpoint_dir_is_skipped_with_its_reason(tmp_path):
    share, head = tmp_path / "share" / "ckpt", tmp_path / "head"
    save(share, 2)
    save(head, 9)  # whole, on a path only the head has
    os.symlink(head / "global_step_9", share / "global_step_9")
    (share / ck.TRACKER).write_text("9")
    found = ck.newest_whole([str(share)], 2)
    assert found["path"] == str(share / "global_step_2") and found["step"] == 2
    assert found["skipped"] == [(str(share / "global_step_9"),
                                 "is a symlink: a step is never taken from outside its checkpoint dir")]


def test_a_fifo_as_the_tracker_never_hangs_the_resume_and_says_so_in_one_line(tmp_path):
    save(tmp_path, 2)
    os.remove(tmp_path / ck.TRACKER)
    os.mkfifo(tmp_path / ck.TRACKER)
    result = within(5, lambda: ck.newest_whole([str(tmp_path)], 2), str(tmp_path / ck.TRACKER))
    error = result.get("error")
    assert isinstance(error, ck.CheckpointError) and "\n" not in str(error)
    assert f"{ck.TRACKER} is a FIFO, not a regular file" in str(error)


@pytest.mark.parametrize("text", ["²", "٣", "３", "9" * 5000, "2" * 19])
def test_a_tracker_in_odd_digits_is_no_step(tmp_path, text):
    save(tmp_path, 3)
    (tmp_path / ck.TRACKER).write_text(text, encoding="utf-8")
    with pytest.raises(ck.CheckpointError, match=r"txt (does not hold a step in ASCII digits|is larger than 64 bytes)"
                       r".*: no save is known to have finished") as caught:
        ck.newest_whole([str(tmp_path)], 2)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("digits", ["٣", "۳", "３"])
def test_a_step_folder_in_other_digits_is_not_a_step(tmp_path, digits):
    save(tmp_path, 2)
    save(tmp_path, 1)
    (tmp_path / "global_step_1").rename(tmp_path / f"global_step_{digits}")  # whole, but not in ASCII digits
    (tmp_path / ck.TRACKER).write_text("3")
    found = ck.newest_whole([str(tmp_path)], 2)
    assert found["path"] == str(tmp_path / "global_step_2") and found["skipped"] == []


def test_shard_names_in_other_digits_are_not_shards(tmp_path):
    save(tmp_path, 2)
    save(tmp_path, 3, ranks=[0])
    (tmp_path / "global_step_3" / "model_world_size_2_rank_١.pt").write_bytes(b"x")  # Arabic-Indic one
    (tmp_path / "global_step_3" / "optim_world_size_2_rank_١.pt").write_bytes(b"x")
    (tmp_path / "global_step_3" / "extra_state_world_size_2_rank_١.pt").write_bytes(b"x")
    found = ck.newest_whole([str(tmp_path)], 2)
    assert found["step"] == 2 and "lacks rank(s) 1 of 2" in found["skipped"][0][1]
