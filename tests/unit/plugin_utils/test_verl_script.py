"""plugin_utils/verl_script.py (with shell_values.py and verl_launch.py) over plugin_utils/shell_lexer.py: a launch
script read as bash would run it, never run. Each construct with a script of the test's own; the expected words are
what bash hands the trainer (checked by hand with bash; tests/unit/plugin_utils/test_verl_examples.py holds the
importer to bash itself over verl's examples)."""

import os
import subprocess

import pytest

from plugin_utils.shell_values import NOT_SET, SCRIPT_ARGS
from plugin_utils.verl_script import MAX_BYTES, ScriptError, read, read_script

RUN = "python3 -m verl.trainer.main_ppo"


def commands(text):
    return read_script(text, "s.sh").commands


def all_words(text):
    """The words of each command of a script's text."""
    return [[w.text for w in c.words] for c in commands(text)]


def unknowns(text):
    """(raw, why, line) of every Unknown in the script's commands."""
    return [(u.raw, u.why, u.line) for c in commands(text) for w in c.words for u in w.unknowns]


# ---------------------------------------------------------------- words


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
    assert all_words(text) == [expected]
    assert unknowns(text) == []


def test_continuations_join_lines_between_words_inside_words_and_inside_double_quotes():
    text = "python3 -m verl.trainer.main_ppo \\\n    a.b=1 \\\n    c.d=2\\\n3 \"e.f=x\\\ny\"\nnext"
    found = commands(text)
    assert [w.text for w in found[0].words] == ["python3", "-m", "verl.trainer.main_ppo", "a.b=1", "c.d=23", "e.f=xy"]
    assert [w.line for w in found[0].words][3:] == [2, 3, 4]  # each word keeps the line it starts on
    assert [w.text for w in found[1].words] == ["next"] and found[1].line == 6


def test_comments_full_line_trailing_and_not_inside_a_word_or_quotes():
    text = ("# a full-line comment with $(touch x) and 'a quote\n"
            "echo a#b '#c' \"#d\" # trailing, with an unclosed ' quote\n"
            "    # an indented comment ending in a backslash \\\n"
            "echo e\n")
    assert all_words(text) == [["echo", "a#b", "#c", "#d"], ["echo", "e"]]
    assert unknowns(text) == []


def test_variables_the_script_sets_expand_and_split_like_the_shell():
    text = ("MODEL=/models/q\nexport DATA=\"/d/x y\"\nARGS='a.b=1 c.d=2'\nN=3; N+=0\n"
            "run $MODEL ${MODEL}/sub \"$DATA\" $DATA $ARGS \"$ARGS\" n=$N pre${N}post")
    assert all_words(text)[-1] == ["run", "/models/q", "/models/q/sub", "/d/x y", "/d/x", "y", "a.b=1", "c.d=2",
                                   "a.b=1 c.d=2", "n=30", "pre30post"]
    assert unknowns(text) == []


def test_exports_and_prefix_assignments_are_the_trainers_environment_plain_assignments_are_not():
    text = f"A=1\nexport B=2\nC=3\nexport C\nD=4 {RUN}\nexport -n B\n{RUN}"
    first, second = read_script(text, "s.sh", 1).trainers[0], read_script(text, "s.sh", 2).trainers[1]
    env = {name: "".join(p.text for p in var.pieces) for name, var in first.env.items()}
    assert env == {"B": "2", "C": "3", "D": "4"} and set(second.env) == {"C"}


def test_unknown_variables_and_substitutions_are_named_and_kept_as_written():
    text = ("run $HOME ${USER} $1 \"$@\" $(date +%s) `hostname` $'a\\tb' ~/x k=~/y ${X%.sh}\n"
            "TAG=v-$(date)\nrun t=$TAG")
    found = commands(text)
    assert [w.text for w in found[0].words] == ["run", "$HOME", "${USER}", "$1", "$@", "$(date ...)", "$(hostname)",
                                                "$'a\\tb'", "~/x", "k=~/y", "${X%.sh}"]
    whys = {u.raw: u.why for w in found[0].words for u in w.unknowns}
    assert whys == {"$HOME": NOT_SET, "${USER}": NOT_SET, "$1": "one of the script's arguments", "$@": SCRIPT_ARGS,
                    "$(date ...)": "a command substitution: never run",
                    "$(hostname)": "a command substitution: never run", "$'a\\tb'": "ANSI-C quoting: not decoded",
                    "~": "a home directory of whoever runs it",
                    "${X%.sh}": "a parameter expansion bash computes from a pattern or indirectly: not evaluated"}
    # A variable set from something unknown keeps it, with the line where the script wrote it.
    assert [w.text for w in found[1].words] == ["run", "t=v-$(date)"]
    assert [(u.raw, u.line) for u in found[1].words[1].unknowns] == [("$(date)", 2)]


def test_substitutions_are_never_run(tmp_path, monkeypatch):
    made = [tmp_path / n for n in ("dollar", "backquote", "heredoc", "assigned", "arith", "default")]
    text = (f"X=$(touch {made[3]})\n"
            f"python3 -m verl.trainer.main_ppo a.b=$(touch {made[0]}) c.d=`touch {made[1]}` e=$X "
            f"f=$((1+$(touch {made[4]}))) g=${{G:-$(touch {made[5]})}}\n"
            f"cat <<EOF\n$(touch {made[2]})\nEOF\n")

    def refuse(*args, **kwargs):
        raise AssertionError("the script was run")

    for name in ("Popen", "run", "call", "check_output"):
        monkeypatch.setattr(subprocess, name, refuse)
    monkeypatch.setattr(os, "system", refuse)
    trainer_, = read_script(text, "s.sh").trainers
    assert [w.text for w in trainer_.args][:2] == ["a.b=$(touch ...)", "c.d=$(touch ...)"]
    assert not any(p.exists() for p in made)


def test_operators_redirections_and_here_documents():
    text = ("python3 -m verl.trainer.main_ppo a=1 2>&1 | tee log.txt; echo done && true\n"
            "cat > conf.yaml <<-'EOF'\n\tpython3 -m verl.trainer.main_ppo inside=1\n\tEOF\nafter")
    script = read_script(text, "s.sh")
    assert [[w.text for w in c.words] for c in script.commands] == [
        ["python3", "-m", "verl.trainer.main_ppo", "a=1"], ["tee", "log.txt"], ["echo", "done"], ["true"], ["cat"],
        ["after"]][:1] + [["tee", "log.txt"], ["echo", "done"], ["cat"], ["after"]]
    assert script.commands[0].redirects == ((1, "2>&1"),)
    assert script.commands[3].redirects == ((2, "> conf.yaml"), (2, "<<-'EOF'"))
    assert len(script.trainers) == 1  # the here-document's body is never read as commands


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("echo ok\necho 'never closed\nmore", 2, "a single quote is never closed"),
    ('echo "open', 1, "a double quote is never closed"),
    ("echo $(date", 1, "a $( is never closed"),
    ("a\necho ${X", 2, "a ${ is never closed"),
    ("echo `date", 1, "a backquote is never closed"),
    ("cat <<EOF\nbody\n", 1, "a here-document never ends"),
    ("echo >", 1, "the redirection > names no file"),
    ("A=1\nB=\x00\n", 2, "holds a NUL byte: not a launch script"),
    ("if true; then\n echo\n", 2, "the if of line 1 has no fi"),
    ("A=x\n" + "A=$A$A\n" * 30, 23, "its values and words grow past 16777216 bytes: not a launch script"),
    ("x=" + "$(" * 120 + ")" * 120, 1, "quotes and expansions nested more than 100 deep: not a launch script"),
    ("{ " * 120 + "true; " + "} " * 120, 1, "commands nested more than 100 deep: not a launch script"),
])
def test_a_script_that_cannot_be_read_is_one_line_naming_the_file_and_line(text, line, problem):
    with pytest.raises(ScriptError) as err:
        read_script(text, "run.sh")
    assert str(err.value) == f"run.sh:{line}: {problem}"


def test_read_refuses_a_large_or_binary_file_in_one_line(tmp_path):
    big, binary = tmp_path / "big.sh", tmp_path / "bin.sh"
    big.write_text("#" * (MAX_BYTES + 1))
    binary.write_bytes(b"echo\n\xff\xfe")
    with pytest.raises(ScriptError, match=r"big.sh: larger than 1048576 bytes"):
        read(str(big))
    with pytest.raises(ScriptError, match=r"bin.sh:2: not UTF-8 text$"):
        read(str(binary))
    with pytest.raises(ScriptError, match=r"nope.sh: cannot read it \(No such file or directory\)$"):
        read(str(tmp_path / "nope.sh"))


def test_trainer_commands_in_every_form_numbered_in_order():
    text = ("python3 -m verl.trainer.main_ppo a=1\n"
            "torchrun --nnodes=1 --nproc_per_node=2 -m verl.trainer.fsdp_sft_trainer b=2\n"
            "python -u -mverl.trainer.sft_trainer_ray c=3\n"
            "python3 $VERL/verl/trainer/main_ppo.py d=4\n"
            "python3 -m other.module e=5\npython3 -c 'import verl'\n")
    found = read_script(text, "s.sh").trainers
    assert [(t.number, t.module, t.command.line) for t in found] == [
        (1, "verl.trainer.main_ppo", 1), (2, "verl.trainer.fsdp_sft_trainer", 2),
        (3, "verl.trainer.sft_trainer_ray", 3), (4, "verl.trainer.main_ppo", 4)]
    assert [[w.text for w in t.launcher] for t in found][:3] == [
        ["python3"], ["torchrun", "--nnodes=1", "--nproc_per_node=2"], ["python", "-u"]]
    assert [[w.text for w in t.args] for t in found] == [["a=1"], ["b=2"], ["c=3"], ["d=4"]]


def words(text, number=1):
    """The trainer's argument words: their text, with unknown parts as the script wrote them."""
    return [w.text for w in trainer(text, number).args]


def trainer(text, number=1):
    script = read_script(text, "s.sh", number)
    return script.trainers[number - 1]


def word(text, at=0):
    return trainer(text).args[at]


def refused(text):
    with pytest.raises(ScriptError) as err:
        read_script(text, "s.sh")
    assert "\n" not in str(err.value)
    return str(err.value)


# ---------------------------------------------------------------- arrays


def test_an_array_hands_each_item_as_a_word_and_comments_in_it_are_comments():
    text = ("A=(\n  a.b=1  # it's a comment: no quote opens\n  'c.d=two words'\n  # (a parenthesis too)\n"
            "  e.f=\"$X\"\n)\nX=late\nA+=(g.h=3)\n" f'{RUN} "${{A[@]}}" z=1')
    assert words(text) == ["a.b=1", "c.d=two words", "e.f=$X", "g.h=3", "z=1"]
    assert word(text, 2).unknowns[0].why == NOT_SET  # the item took $X when the array was set: not set then


def test_unquoted_and_star_expansions_split_as_bash_splits_them():
    text = f"A=(x 'y z')\n{RUN} ${{A[@]}} \"${{A[*]}}\" ${{A[*]}} k=\"${{A[1]}}\" n=${{#A[@]}}"
    assert words(text) == ["x", "y", "z", "x y z", "x", "y", "z", "k=y z", "n=2"]


def test_an_empty_array_hands_nothing_where_an_empty_string_hands_an_empty_word():
    text = f'E=()\nS=""\n{RUN} "${{E[@]}}" x"${{E[@]}}"y "$S" $S ""'
    assert words(text) == ["xy", "", ""]


def test_an_array_never_closed_or_holding_an_operator_is_one_line_naming_its_line():
    assert refused("A=(\n x\n") == "s.sh:1: an array ( is never closed"
    assert refused("\nA=(x; y)") == "s.sh:2: an array holds ;, which bash does not take there"
    # An array assignment as an item (bash: syntax error near `('), once a crash of the reader.
    assert refused('DATA=(\nA=(1 2 "$X")\n)') == (
        "s.sh:2: an array holds an array assignment, which bash does not take there")


# ---------------------------------------------------------------- defaults, arithmetic


def test_a_default_is_taken_where_the_script_never_sets_the_name_and_says_so():
    text = ('M=${MODEL:-/models/m}\nE=${ENTRY:-"-m verl.trainer.sft_trainer"}\n'
            'torchrun --nnodes=1 $E a=$M b=${B-x} c=${C:=y} d=$C e=${E2:+no} f=${UNSET2:-${NESTED:-~/n}}')
    t = trainer(text)
    assert t.module == "verl.trainer.sft_trainer"
    assert [w.text for w in t.args] == ["a=/models/m", "b=x", "c=y", "d=y", "e=", "f=~/n"]
    assert [(d.name, d.line) for d in t.args[0].defaults] == [("MODEL", 1)]
    assert [d.name for d in t.args[3].defaults] == ["C"]  # := set it, and says where from
    assert t.args[5].unknowns[0].why == "a home directory of whoever runs it"


def test_a_default_is_not_taken_where_the_script_sets_the_name_even_to_empty():
    text = f"A=set\nB=\nU=1\nunset U\n{RUN} a=${{A:-d}} b=${{B:-d}} c=${{B-d}} u=${{U:-d}} r=${{R:?give R}}"
    t = trainer(text)
    assert [w.text for w in t.args] == ["a=set", "b=d", "c=", "u=d", "r=${R:?give R}"]
    assert not t.args[1].defaults and not t.args[3].defaults  # the script's own values, not a default
    assert t.args[4].unknowns[0].why.startswith("required by the script (${R:?})")


def test_arithmetic_over_the_integers_the_script_set():
    text = ("P=$((1024 * 2))\nR=${R:-4096}\nT=$(( (P + R) * 2 ))\nO=010\n"
            f"{RUN} t=$T d=$((7 / 2)) n=$((-7 / 2)) m=$((-7 % 3)) p=$((2 ** 10)) u=$((P + HOME)) z=$((1 / 0)) "
            "o=$((O + 1)) h=$((0x10))")
    assert words(text)[:5] == ["t=12288", "d=3", "n=-3", "m=-1", "p=1024"]
    assert [w.unknowns[0].raw for w in trainer(text).args[5:8]] == ["$((P + HOME))", "$((1 / 0))", "$((O + 1))"]
    assert words(text)[8] == "h=16"


# ---------------------------------------------------------------- conditions and branches


def test_conditions_known_here_are_decided_as_bash_decides_them():
    text = ('B=${B:-vllm}\nN=2\nX=()\nif [ "$B" = sglang ]; then X+=(mode=async); elif [ -n "$B" ]; then X+=(n=1); fi\n'
            '[ "$N" -gt 1 ] && V=big || V=small\n[[ $B == v* && -z "$Q" ]] && X+=(q=1)\n'
            'case "$B" in sg*) X+=(c=sg);; vllm|hf) X+=(c=v);; *) exit 1;; esac\n'
            f'{RUN} "${{X[@]}}" v=$V')
    assert words(text) == ["n=1", "q=1", "c=v", "v=big"]
    assert [w.maybe is None for w in trainer(text).args] == [True, False, True, True]  # $Q is not known here


def test_branches_not_decided_here_make_maybe_items_and_values_they_leave_different_unknown():
    text = ("D=$(probe)\nA=(base=1)\nN=8\ncase $D in\n  npu) A+=(npu=1); N=16;;\n  gpu) ;;\n  *) exit 1;;\nesac\n"
            f'{RUN} "${{A[@]}}" n=$N')
    args = trainer(text).args
    assert [w.text for w in args] == ["base=1", "npu=1", "n=$N"]
    assert args[0].maybe is None
    assert args[1].maybe == ("passed only when line 4's case matches npu (not decided here: $(probe) (line 1) is a "
                             "command substitution: never run)")
    assert args[2].unknowns[0].why.startswith("set differently by the script's branches (line 5; not decided here")


def test_a_branch_that_exits_leaves_the_others_and_one_that_agrees_keeps_the_value():
    text = f'if [ "$#" -lt 2 ]; then echo usage; exit 1; fi\nif [ -f x ]; then M=/a; else M=/a; fi\n{RUN} m=$M'
    assert words(text) == ["m=/a"]


def test_an_assignment_is_taken_only_where_the_shell_keeps_it():
    text = ("A=/x | true\nfalse && B=/x\nC=/x &\n( D=/x )\ntrue && E=/x\nF=/old\n{ F=/x; }\n"
            f"{RUN} a=$A b=$B c=$C d=$D e=$E f=$F")
    args = trainer(text).args
    assert [w.text for w in args][4:] == ["e=/x", "f=/x"]
    assert "a subshell bash does not keep it from" in args[0].unknowns[0].why  # a pipeline
    assert args[1].unknowns[0].why == NOT_SET  # false && ...: never ran
    assert "background job" in args[2].unknowns[0].why and "( ) subshell" in args[3].unknowns[0].why


def test_what_may_change_any_value_makes_every_earlier_value_unknown():
    text = f"A=1\nsource ./env.sh\nB=2\nread -r C\n{RUN} a=$A b=$B c=$C d=${{D:-x}}"
    args = trainer(text).args
    assert [w.text for w in args][1] == "b=2"
    assert args[0].unknowns[0].why == "line 2 (source) may change it"
    assert args[2].unknowns[0].why == "read by read on line 4"
    assert args[3].unknowns[0].why == "line 2 (source) may change it"  # its default is not taken after a source


def test_an_arithmetic_command_makes_only_the_names_it_holds_unknown():
    args = trainer(f"A=1\nB=2\n(( A++ ))\n{RUN} a=$A b=$B").args
    assert [w.text for w in args] == ["a=$A", "b=2"]
    assert args[0].unknowns[0].why == "line 3's (( )) may change it"


def test_a_loop_and_a_function_run_only_sometimes():
    text = ("A=(a=1)\nfor v in x y; do A+=(loop=$v); done\nf() { A+=(fn=1); }\n"
            f'{RUN} "${{A[@]}}"')
    args = trainer(text).args
    assert [w.text for w in args] == ["a=1", "loop=$v", "fn=1"]
    assert args[1].maybe.startswith("passed only when line 2's loop runs its body")
    assert args[2].maybe.startswith("passed only when function f (line 3) is called")


# ---------------------------------------------------------------- launches


def test_what_launches_a_trainer_and_what_only_prints_one():
    script = read_script(f"echo {RUN} a=1\nprintf '%s' '{RUN}'\nexec env X=1 nohup python3 -u -m verl.trainer.main_ppo "
                         "b=2\necho after", "s.sh")
    assert [t.module for t in script.trainers] == ["verl.trainer.main_ppo"]
    t = script.trainers[0]
    assert [w.text for w in t.args] == ["b=2"] and t.env["X"].pieces[0].text == "1"
    assert [c.line for c in script.commands] == [1, 2, 3]  # exec: nothing after it runs


@pytest.mark.parametrize(("text", "module", "why"), [
    ("python -m verl.experimental.fully_async_policy.fully_async_main a=1",
     "verl.experimental.fully_async_policy.fully_async_main", None),
    ("python3 -m verl_mlite.launch a=1", "verl_mlite.launch", None),
    ("$COMMAND a=1", None, f"$COMMAND is {NOT_SET}"),
    ("python3 -m $MOD a=1", None, f"its module $MOD is {NOT_SET}"),
    ("python3 -m torch.distributed.run --nproc_per_node 8 -m verl.trainer.sft_trainer a=1", "verl.trainer.sft_trainer",
     None),
    ("uv run python verl/trainer/main_ppo.py a=1", "verl.trainer.main_ppo", None),
    ("ray job submit --address x -- python3 -m verl.trainer.main_ppo a=1", "verl.trainer.main_ppo", None)])
def test_each_launch_names_what_it_runs(text, module, why):
    launch = read_script(text, "s.sh").launches[0]
    assert (launch.module, launch.why) == (module, why)


def test_the_script_s_arguments_are_read_as_none_and_a_function_s_as_unknown():
    assert trainer(f'{RUN} a=1 "$@"').args[1].unknowns[0].args
    assert trainer(f'{RUN} a=1 "$@"').args[1].unknowns[0].why == SCRIPT_ARGS
    inner = read_script(f'f() {{ {RUN} "$@"; }}\nf a=1', "s.sh").trainers[0].args[0].unknowns[0]
    assert (inner.args, inner.why) == (False, "the arguments of the function it is in")


# ---------------------------------------------------------------- secrets, limits, errors


def test_a_secret_is_never_expanded():
    t = trainer(f"export WANDB_API_KEY=s3cr3t-1\nK=$WANDB_API_KEY\n"
                f"{RUN} k=$WANDB_API_KEY j=$K l=${{HF_TOKEN:-s3cr3t-2}}")
    assert [w.text for w in t.args] == ["k=$WANDB_API_KEY", "j=$WANDB_API_KEY", "l=${HF_TOKEN:-s3cr3t-2}"]
    assert all(w.unknowns[0].secret for w in t.args)


def test_a_brace_expansion_in_a_word_is_not_read_as_one_word():
    args = trainer(f"X={{a,b}}\n{RUN} l={{console,wandb}} s={{1..3}} q='{{a,b}}' e={{}} x=$X").args
    assert [w.text for w in args] == ["l={console,wandb}", "s={1..3}", "q={a,b}", "e={}", "x={a,b}"]
    assert [bool(w.unknowns) for w in args] == [True, True, False, False, False]  # bash: l=console l=wandb ...


def test_a_command_substitution_shows_its_first_word_only():
    t = trainer(f'{RUN} a=$(curl -H "Authorization: Bearer s3cr3t" x) b=`cat /k` c=$(date)')
    assert [w.text for w in t.args] == ["a=$(curl ...)", "b=$(cat ...)", "c=$(date)"]
