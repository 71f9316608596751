"""plugin_utils/verl_script.py (over shell_lexer.py): a launch script's words as a POSIX shell splits them, the
variables the script sets followed, and nothing of it ever run."""

import os
import subprocess

import pytest

from plugin_utils import verl_script
from plugin_utils.verl_script import NOT_SET, ScriptError


def words(text):
    """The words of each command of a script's text."""
    return [[w.text for w in c.words] for c in verl_script.parse(text, "s.sh")]


def unknowns(text):
    """(raw, why, line) of every Unknown in the script's commands."""
    return [(u.raw, u.why, u.line) for c in verl_script.parse(text, "s.sh") for w in c.words for u in w.unknowns]


@pytest.mark.parametrize(("text", "expected"), [
    ("echo 'a b' c", ["echo", "a b", "c"]),  # single quotes: one word, spaces kept
    ("echo \"a b\" 'c\"d'", ["echo", "a b", 'c"d']),
    ("echo a\\ b \\'x", ["echo", "a b", "'x"]),  # backslash outside quotes
    ("echo \"a\\\"b\" \"\\$HOME\" \"c\\d\"", ["echo", 'a"b', "$HOME", "c\\d"]),  # inside double quotes: only \" \$ \\
    ("echo '$HOME' \\$HOME", ["echo", "$HOME", "$HOME"]),  # quoted $: literal, never an unknown
    ("echo a'b'\"c\"d", ["echo", "abcd"]),  # quotes inside a word join it
    ("echo '' \"\" x", ["echo", "", "", "x"]),  # empty quotes make empty words
    ("x.y=[1,2] trainer.logger=['console','wandb']", ["x.y=[1,2]", "trainer.logger=[console,wandb]"]),
])
def test_quoting_single_double_and_escaped(text, expected):
    assert words(text) == [expected]
    assert unknowns(text) == []


def test_continuations_join_lines_between_words_inside_words_and_inside_double_quotes():
    text = "python3 -m verl.trainer.main_ppo \\\n    a.b=1 \\\n    c.d=2\\\n3 \"e.f=x\\\ny\"\nnext"
    commands = verl_script.parse(text, "s.sh")
    assert [w.text for w in commands[0].words] == ["python3", "-m", "verl.trainer.main_ppo", "a.b=1", "c.d=23",
                                                   "e.f=xy"]
    assert [w.line for w in commands[0].words][3:] == [2, 3, 4]  # each word keeps the line it starts on
    assert [w.text for w in commands[1].words] == ["next"] and commands[1].line == 6


def test_comments_full_line_trailing_and_not_inside_a_word_or_quotes():
    text = ("# a full-line comment with $(touch x) and 'a quote\n"
            "echo a#b '#c' \"#d\" # trailing, with an unclosed ' quote\n"
            "    # an indented comment ending in a backslash \\\n"
            "echo e\n")
    assert words(text) == [["echo", "a#b", "#c", "#d"], ["echo", "e"]]
    assert unknowns(text) == []


def test_variables_the_script_sets_expand_and_split_like_the_shell():
    text = ("MODEL=/models/q\nexport DATA=\"/d/x y\"\nARGS='a.b=1 c.d=2'\nN=3; N+=0\n"
            "run $MODEL ${MODEL}/sub \"$DATA\" $DATA $ARGS \"$ARGS\" n=$N pre${N}post")
    assert words(text)[-1] == ["run", "/models/q", "/models/q/sub", "/d/x y", "/d/x", "y", "a.b=1", "c.d=2",
                               "a.b=1 c.d=2", "n=30", "pre30post"]
    assert unknowns(text) == []


def test_exports_and_prefix_assignments_are_the_commands_environment_plain_assignments_are_not():
    text = "A=1\nexport B=2\nC=3\nexport C\nD=4 python3 -m verl.trainer.main_ppo\nexport -n B\nlast"
    commands = verl_script.parse(text, "s.sh")
    env = {name: "".join(p.text for p in var.pieces) for name, var in commands[0].env.items()}
    assert env == {"B": "2", "C": "3", "D": "4"}
    assert "D" not in verl_script.parse(text, "s.sh")[1].env and set(commands[1].env) == {"C"}


def test_unknown_variables_and_substitutions_are_named_and_kept_as_written():
    text = ("run $HOME ${USER} $1 \"$@\" $(date +%s) `hostname` ${X:-3} $((1+2)) ~/x k=~/y $'a\\tb'\n"
            "TAG=v-$(date)\nrun t=$TAG")
    commands = verl_script.parse(text, "s.sh")
    assert [w.text for w in commands[0].words] == ["run", "$HOME", "${USER}", "$1", "$@", "$(date +%s)", "`hostname`",
                                                   "${X:-3}", "$((1+2))", "~/x", "k=~/y", "$'a\\tb'"]
    found = {u.raw: u.why for w in commands[0].words for u in w.unknowns}
    assert found == {"$HOME": NOT_SET, "${USER}": NOT_SET, "$1": "one of the script's arguments",
                     "$@": "the script's arguments", "$(date +%s)": "a command substitution: never run",
                     "`hostname`": "a command substitution: never run",
                     "${X:-3}": "a parameter expansion with an operator: not evaluated",
                     "$((1+2))": "arithmetic: not evaluated", "~": "the home directory of whoever runs it",
                     "$'a\\tb'": "ANSI-C quoting: not decoded"}
    # A variable set from something unknown keeps it, with the line where the script wrote it.
    assert [w.text for w in commands[1].words] == ["run", "t=v-$(date)"]
    assert [(u.raw, u.line) for u in commands[1].words[1].unknowns] == [("$(date)", 2)]


def test_substitutions_are_never_run(tmp_path, monkeypatch):
    made = [tmp_path / n for n in ("dollar", "backquote", "heredoc", "assigned", "arith")]
    text = (f"X=$(touch {made[3]})\n"
            f"python3 -m verl.trainer.main_ppo a.b=$(touch {made[0]}) c.d=`touch {made[1]}` e=$X "
            f"f=$((1+$(touch {made[4]})))\n"
            f"cat <<EOF\n$(touch {made[2]})\nEOF\n")

    def refuse(*args, **kwargs):
        raise AssertionError("the script was run")

    for name in ("Popen", "run", "call", "check_output"):
        monkeypatch.setattr(subprocess, name, refuse)
    monkeypatch.setattr(os, "system", refuse)
    trainer, = verl_script.trainers(verl_script.parse(text, "s.sh"))
    assert [w.text for w in trainer.args][:2] == [f"a.b=$(touch {made[0]})", f"c.d=`touch {made[1]}`"]
    assert not any(p.exists() for p in made)


def test_a_variable_set_conditionally_in_a_loop_or_after_source_is_unknown():
    text = ("A=1\nif [ -n \"$X\" ]; then\n  A=2\nfi\nfor F in a b; do B=$F; done\n"
            "run $A $F $B\nC=3\nsource env.sh\nrun $C\nread D\nrun $D")
    commands = verl_script.parse(text, "s.sh")
    whys = [[u.why for w in c.words for u in w.unknowns] for c in commands if c.words[0].text == "run"]
    assert whys[0][0].startswith("set inside an if, a loop, a case or a function (line 3)")
    assert whys[0][1] == "the loop variable of line 5" and whys[0][2].startswith("set inside")
    assert whys[1] == ["line 8 (source) may change it"] and whys[2] == ["read on line 10"]
    assert [c.depth for c in commands if c.words[0].text == "run"] == [0, 0, 0]


def test_operators_redirections_and_here_documents():
    text = ("python3 -m verl.trainer.main_ppo a=1 2>&1 | tee log.txt; echo done && true\n"
            "cat > conf.yaml <<-'EOF'\n\tpython3 -m verl.trainer.main_ppo inside=1\n\tEOF\nafter")
    commands = verl_script.parse(text, "s.sh")
    assert [[w.text for w in c.words] for c in commands] == [
        ["python3", "-m", "verl.trainer.main_ppo", "a=1"], ["tee", "log.txt"], ["echo", "done"], ["true"], ["cat"],
        ["after"]]
    assert commands[0].redirects == ((1, "2>&1"),) and commands[4].redirects == ((2, "> conf.yaml"), (2, "<<-'EOF'"))
    assert len(verl_script.trainers(commands)) == 1  # the here-document's body is never read as commands


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("echo ok\necho 'never closed\nmore", 2, "a single quote is never closed"),
    ('echo "open', 1, "a double quote is never closed"),
    ("echo $(date", 1, "a $( is never closed"),
    ("a\necho ${X", 2, "a ${ is never closed"),
    ("echo `date", 1, "a backquote is never closed"),
    ("cat <<EOF\nbody\n", 1, "a here-document never ends"),
    ("echo >", 1, "the redirection > names no file"),
])
def test_a_script_that_cannot_be_read_is_one_line_naming_the_file_and_line(text, line, problem):
    with pytest.raises(ScriptError) as err:
        verl_script.parse(text, "run.sh")
    assert str(err.value) == f"run.sh:{line}: {problem}"


def test_read_refuses_a_large_or_binary_file_in_one_line(tmp_path):
    big, binary = tmp_path / "big.sh", tmp_path / "bin.sh"
    big.write_text("#" * (verl_script.MAX_BYTES + 1))
    binary.write_bytes(b"echo\n\xff\xfe")
    with pytest.raises(ScriptError, match=r"big.sh: larger than 1048576 bytes"):
        verl_script.read(str(big))
    with pytest.raises(ScriptError, match=r"bin.sh:2: not UTF-8 text$"):
        verl_script.read(str(binary))
    with pytest.raises(ScriptError, match=r"nope.sh: cannot read it \(No such file or directory\)$"):
        verl_script.read(str(tmp_path / "nope.sh"))


def test_trainer_commands_in_every_form_numbered_in_order():
    text = ("python3 -m verl.trainer.main_ppo a=1\n"
            "torchrun --nnodes=1 --nproc_per_node=2 -m verl.trainer.fsdp_sft_trainer b=2\n"
            "python -u -mverl.trainer.sft_trainer_ray c=3\n"
            "python3 $VERL/verl/trainer/main_ppo.py d=4\n"
            "python3 -m other.module e=5\npython3 -c 'import verl'\n")
    found = verl_script.trainers(verl_script.parse(text, "s.sh"))
    assert [(t.number, t.module, t.command.line) for t in found] == [
        (1, "verl.trainer.main_ppo", 1), (2, "verl.trainer.fsdp_sft_trainer", 2),
        (3, "verl.trainer.sft_trainer_ray", 3), (4, "verl.trainer.main_ppo", 4)]
    assert [[w.text for w in t.launcher] for t in found][:3] == [
        ["python3"], ["torchrun", "--nnodes=1", "--nproc_per_node=2"], ["python", "-u"]]
    assert [[w.text for w in t.args] for t in found] == [["a=1"], ["b=2"], ["c=3"], ["d=4"]]
