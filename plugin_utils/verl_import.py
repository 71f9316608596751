"""A JobSpec from a verl launch script (import.yml): the script read as bash would run it (plugin_utils/verl_script.py,
never run), its trainer command taken apart, jobspecs/<name>.yaml written.

The trainer's module and algorithm.adv_estimator give the workload: main_ppo with gae is ppo, with grpo grpo, with
another estimator verl's PPO trainer runs (rloo, remax, gpg...) ppo with that estimator kept as an override; Hydra's
--config-name is mapped to what verl 0.9.1 composes the same way (ppo_megatron_trainer: model_engine=megatron) or
refused. A key the spec owns (OWNED_KEYS in module_utils/jobspec/owned.py, the one home of those keys: its field column
says which spec field a key becomes) becomes that field, or is left out with why (the spec renders it, or keeps it in
the job's record); every other key=value stays an override, in the script's order, as bash would have passed it.
What the script cannot know ($HOME, $(...), a value its branches leave different, an array item passed only in some
branch, a secret's value) and what the spec refuses (an absolute path that is not one, a `~` deletion) is never
guessed: it is written into the spec as a comment, at its place, with why, for the user to settle (or for the site's
jobspec_defaults or -e to give). So the written spec always reads back, and validates, as written. A word whose key
itself is not known (it could set the estimator, or any owned key) refuses the script. Every line of the report says
where a word of the script went, and where a value came from when the script took a default; other commands are
named by their first word only, a secret never by its value. A script that cannot be imported is one ScriptError
line naming the file, the line and the problem.
"""

import json
import os
import tempfile
import types
from dataclasses import dataclass, field

import yaml
from ansible.module_utils.base import conventions, redaction
from ansible.module_utils.jobspec import owned
from ansible.module_utils.jobspec.fields import SPEC_FIELDS, TRAINERS, JobSpecError, check, check_fields
from ansible.module_utils.jobspec.render import LOGGERS

from plugin_utils import safe_yaml, verl_launch, verl_script
from plugin_utils.verl_script import ScriptError

ESTIMATOR = owned.ESTIMATOR
VERL_DEFAULT_ESTIMATOR = "gae"  # what verl's ppo_trainer.yaml sets when a script does not
# verl's trainer modules a JobSpec runs: main_ppo is ppo or grpo by its estimator; every SFT trainer becomes the spec's
# sft, which runs verl.trainer.sft_trainer_ray (render.py; a test holds this table to what it renders).
MODULES = {"verl.trainer.main_ppo": None, "verl.trainer.sft_trainer_ray": "sft", "verl.trainer.sft_trainer": "sft",
           "verl.trainer.fsdp_sft_trainer": "sft"}
# Hydra's --config-name a script may give, by workload: verl 0.9.1's config each trainer composes anyway (nothing to
# add), and the one it keeps for older scripts, ppo_megatron_trainer.yaml: ppo_trainer with model_engine=megatron.
CONFIG_NAMES = {"ppo": {"ppo_trainer": (), "ppo_megatron_trainer": ("model_engine=megatron",)},
                "sft": {"sft_trainer_engine": ()}}
CONFIG_NAMES["grpo"] = CONFIG_NAMES["ppo"]
VERL_CONFIG_PATHS = ("config", "./config")  # --config-path as verl's examples give it: the trainer's own folder
# Older names of keys the spec owns, by workload: the old SFT trainer's model.partial_pretrain is model.path.
ALIASES = {"sft": {"model.partial_pretrain": "model.path"}}
# Spec fields an owned key names that a script's value never sets, and why.
NOT_TAKEN = {"checkpoint_dir": "the spec keeps checkpoints in the job's own record (checkpoint_dir's default)",
             "resume_from": "a job resumes another job's checkpoint through retries or job.yml -e do=resume"}
# torchrun's flags that say how big the job is; Ray places the job, so its other flags mean nothing to a spec.
LAUNCHER_SIZE = {"--nnodes": "resources.nnodes", "--nproc_per_node": "resources.n_gpus_per_node",
                 "--nproc-per-node": "resources.n_gpus_per_node"}
OTHERS_SHOWN = 50  # the other commands the report names one a line; the rest are counted
# The longest value written into a spec from a script (an override, a field, an env value): a path is at most 4096,
# a list of files a few times that; a longer one is left for the user, shortened, never written whole.
MAX_WRITTEN = 16384
_CONFIG_NAME = ("--config-name", "-cn")
_CONFIG_PATH = ("--config-path", "-cp", "--config-dir", "-cd")
_OVERRIDE_ITEM = next(f for f in SPEC_FIELDS if f.name == "overrides").item
_ENV_ITEM = next(f for f in SPEC_FIELDS if f.name == "env").item
_ORDER = [f.name for f in SPEC_FIELDS if f.name not in ("env", "overrides")] + ["env", "overrides"]


def estimators():
    """{estimator: workload}, from the row of owned.SETTINGS that renders algorithm.adv_estimator."""
    row = next(r for r in owned.SETTINGS if r[0] == ESTIMATOR)
    return {row[3](types.SimpleNamespace(workload=w), None, None): w for w in row[1]}


def spec_field(path):
    """The Field of a dotted spec field name (resources.nnodes), or None when the text names none."""
    fields, found = SPEC_FIELDS, None
    for part in path.split("."):
        found = next((f for f in fields or () if f.name == part), None)
        if found is None:
            return None
        fields = found.fields
    return found


def _unquote(text):
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def hydra_value(text, kind):
    """A field's value from an override's value as hydra reads it: its quotes and list brackets gone, null None."""
    text = text.strip()
    if text == "null":
        return None
    if kind == "paths" and text.startswith("[") and text.endswith("]"):
        items, item, quote = [], [], None
        for c in text[1:-1]:
            quote = (None if c == quote else quote) if quote else (c if c in "'\"" else None)
            if c == "," and quote is None:
                items.append("".join(item))
                item = []
            else:
                item.append(c)
        return [_unquote(i.strip()) for i in [*items, "".join(item)] if i.strip()]
    if kind == "int" and text.lstrip("+-").isdigit():
        return int(text)
    return _unquote(text)


def _problem(err):
    """A JobSpecError's problem, without the field it names (the report names the script's key instead)."""
    return str(err).split("': ", 1)[-1]


def _shown(text):
    """A value as a comment shows it: whole up to a line's worth, else its start."""
    return text if text is None or len(text) <= 200 else text[:200] + "..."


def _key(word):
    """(key, has '=') of a word, the key being what comes before its first '='; key None when an unknown part comes
    first (the key itself is not known)."""
    text = []
    for piece in word.pieces:
        if piece.unknown is not None:
            return None, False
        eq = piece.text.find("=")
        if eq >= 0:
            text.append(piece.text[:eq])
            return "".join(text), True
        text.append(piece.text)
    return "".join(text), False


@dataclass
class Imported:
    """What one trainer command of a script makes: the spec (as written), its YAML text, the report's lines, and the
    overrides it added that bash would not pass as such (what a --config-name means: {override: the flag})."""

    spec: dict
    text: str
    lines: list
    workload: str
    trainer: verl_launch.Trainer
    derived: dict = field(default_factory=dict)


class _Import:
    def __init__(self, name, trainer):
        self.name, self.trainer = name, trainer
        self.spec, self.lines, self.left, self.taken, self.unknown = {}, [], {"fields": [], "env": []}, {}, {}
        self.overrides = []  # (text, None) kept, or (text, why) left as a comment at its place
        self.derived, self.defaults = {}, {}

    def say(self, line, text):
        self.lines.append(f"line {line}: {conventions.one_line(text, 300)}")

    def leave(self, kind, source, key, value, line, why):
        """Written into the spec as a comment at its place, with why (once: the critic's model path is the actor's
        again); said in the report."""
        value = _shown(value)
        if not any(left[:2] == (key, value) for left in self.left[kind]):
            self.left[kind].append((key, value, f"line {line}: {source}: {conventions.one_line(why, 200)}"))
        target = f"env.{key}" if kind == "env" else key
        self.say(line, f"{source} -> {target}: left for you, commented in the spec: {why}")

    def note(self, pieces, line):
        """Remember where the values in pieces came from (a default taken, something unknown); why they cannot be
        taken as they are, or None."""
        if sum(len(p.text) for p in pieces) > MAX_WRITTEN:
            return f"longer than {MAX_WRITTEN} characters: never written into a spec (the script has it on line {line})"
        unknowns = [p.unknown for p in pieces if p.unknown is not None]
        for p in pieces:
            if p.default is not None:
                self.defaults.setdefault(p.default, set()).add(line)
        for u in unknowns:
            self.unknown.setdefault((u.raw, u.why), set()).add(u.line)
        maybe = next((p.maybe for p in pieces if p.maybe), None)
        why = [f"{u.raw} is {u.why}" for u in unknowns] + ([maybe] if maybe else [])
        return "; ".join(dict.fromkeys(why)) or None

    def set_field(self, key, field_name, word, text, line):
        """The value of a spec field from a script's text: set, or left for the user with why."""
        f = spec_field(field_name)
        why = self.note(word.pieces, line)
        if why:
            return self.leave("fields", key, field_name, text, line, why)
        try:
            value = check(f, hydra_value(text, f.kind), field_name)
        except JobSpecError as err:
            return self.leave("fields", key, field_name, text, line, _problem(err))
        if field_name in self.taken and self.taken[field_name][0] != value:
            raise ScriptError(self.name, line, f"{key} sets {field_name}, which line {self.taken[field_name][2]} "
                              f"({self.taken[field_name][1]}) sets to another value: a spec has one {field_name}")
        self.taken[field_name] = (value, key, line)
        node = self.spec
        *parents, last = field_name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        self.say(line, f"{key} -> {field_name}")
        return None

    def owned_key(self, word, key, value, workload, alias=None):
        field_name = owned.OWNED_KEYS[key]
        rows = {r[0]: r[1] for r in owned.SETTINGS}
        source = f"{alias} ({workload}'s older name of {key})" if alias else key
        if workload not in rows.get(key, TRAINERS):
            return self.say(word.line, f"{source}: left out: the spec renders it for {', '.join(rows[key])} only")
        if spec_field(field_name) is None:
            return self.say(word.line, f"{source}: left out: the spec renders it (every job logs to "
                            f"{', '.join(LOGGERS)}; from {field_name})")
        if field_name in NOT_TAKEN:
            return self.say(word.line, f"{source}: left out: {NOT_TAKEN[field_name]}")
        return self.set_field(source, field_name, word, value, word.line)

    def override(self, word, workload, text=None):
        text = word.text if text is None else text
        why = self.note(word.pieces, word.line)
        if not why:
            try:
                owned.check_overrides([text], workload)  # first: its reasons say more than the pattern's
                check(_OVERRIDE_ITEM, text, "override")
            except JobSpecError as err:
                why = _problem(err)
        self.overrides.append((_shown(text) if why else text, why and f"line {word.line}: "
                               f"{conventions.one_line(why, 240)}"))
        if why:
            return self.say(word.line, f"{_shown(text)}: left for you, commented in the spec's overrides: {why}")
        return self.say(word.line, f"kept as an override: {text}")

    def env(self, name, var):
        if redaction.is_secret_name(name):
            return self.say(var.line, f"{name}: left out of env: a secret is never written into a spec file; set it "
                            f"in the site's env (jobspec_defaults) or give it with -e env.{name}=...")
        try:
            owned.check_env({name: ""})
        except JobSpecError as err:
            return self.say(var.line, f"{name}: left out of env: {_problem(err)}")
        value = "".join(p.text for p in var.pieces)
        why = var.doubt or self.note(var.pieces, var.line)
        if why:
            return self.leave("env", name, name, None if var.doubt else value, var.line, why)
        self.spec.setdefault("env", {})[name] = check(_ENV_ITEM, value, f"env.{name}")
        return self.say(var.line, f"{name} -> env.{name}")

    def flag(self, word, args, workload, module):
        """A hydra flag (--config-name, --config-path, --cfg...): mapped, left out, or the script refused."""
        flag, eq, value = word.text.partition("=")
        value_word = word
        if not eq and flag in _CONFIG_NAME + _CONFIG_PATH:
            if not args:
                raise ScriptError(self.name, word.line, f"{flag} has no value")
            value_word = args.pop(0)
            value = value_word.text
        if flag in _CONFIG_NAME + _CONFIG_PATH and value_word.unknowns:
            u = value_word.unknowns[0]
            raise ScriptError(self.name, word.line, f"{flag} holds {u.raw} ({u.why}): which config verl composes "
                              "depends on it; set it in the script")
        shown = f"{flag}={value}" if flag in _CONFIG_NAME + _CONFIG_PATH else word.text
        if flag in _CONFIG_PATH:
            if value.rstrip("/") not in VERL_CONFIG_PATHS:
                raise ScriptError(self.name, word.line, f"{shown}: a config folder of the script's own, not verl's; "
                                  "the spec composes verl's own config with overrides (give what that folder changes "
                                  "as overrides)")
            return self.say(word.line, f"{shown}: left out: verl's own config folder, which the spec composes")
        if flag in _CONFIG_NAME:
            config = value.removesuffix(".yaml")
            names = CONFIG_NAMES[workload]
            if config not in names:
                known = ", ".join(f"{n} ({', '.join(o) or 'its own'})" for n, o in names.items())
                raise ScriptError(self.name, word.line, f"{shown}: verl 0.9.1's {module} has no config of that name "
                                  f"the spec can compose (it composes: {known})")
            for text in names[config]:
                self.derived[text] = shown
                self.overrides.insert(sum(1 for t in self.overrides if t[0] in self.derived), (text, None))
            added = f" -> {', '.join(names[config])} (verl 0.9.1 composes {config} so)" if names[config] else \
                ": left out: the config verl composes anyway"
            return self.say(word.line, shown + added)
        return self.say(word.line, f"{word.text}: left out: a hydra flag (the spec runs verl's own config, with "
                        "overrides)")


def _first(launches):
    """The launch a refusal names first: one of verl's modules, then one whose module is not known, then the rest."""
    def rank(launch):
        verl = (launch.module or launch.why or "").startswith("verl") or "runs verl" in (launch.why or "")
        return (not verl, launch.module is not None)
    return min(launches, key=rank)


def _choose(script, command, name):
    found = script.trainers
    listed = "; ".join(f"{t.number}: line {t.command.line}, {t.module}" for t in found)
    if not found:
        if script.launches:
            other = _first(script.launches)
            if other.module:
                raise ScriptError(name, other.command.line, f"launches {other.module}, not one of verl's trainers a "
                                  f"JobSpec runs ({', '.join(MODULES)})")
            raise ScriptError(name, other.command.line, f"{other.why}: what it launches cannot be read without "
                              "running it")
        raise ScriptError(name, None, f"none of its {script.lines} lines runs a verl trainer (python3 -m "
                          "verl.trainer.<module> key=value ...)")
    if command is None and len(found) > 1:
        raise ScriptError(name, None, f"{len(found)} trainer commands ({listed}): choose one with -e command=N")
    if command is not None and not (isinstance(command, int) and 1 <= command <= len(found)):
        raise ScriptError(name, None, f"command: must be a number from 1 to {len(found)} (the trainer commands: "
                          f"{listed})")
    return found[(command or 1) - 1]


def _workload(trainer, args, name):
    """(workload, what the report says, an estimator kept as an override or None)."""
    module, line = trainer.module, trainer.command.line
    if module not in MODULES:
        raise ScriptError(name, line, f"{module} is not a trainer a JobSpec runs ({', '.join(MODULES)})")
    if MODULES[module]:
        return MODULES[module], f"{module} -> workload {MODULES[module]}", None
    words = [w for w in args if (_key(w)[0] or "").lstrip("+") == ESTIMATOR]
    if not words:
        workload = estimators()[VERL_DEFAULT_ESTIMATOR]
        return workload, f"{module} with verl's default {ESTIMATOR}={VERL_DEFAULT_ESTIMATOR} -> workload {workload}", \
            None
    word = words[-1]
    if word.unknowns:
        raise ScriptError(name, word.line, f"{ESTIMATOR} holds {word.unknowns[0].raw} ({word.unknowns[0].why}): "
                          "the workload depends on it; set it in the script")
    value = hydra_value(word.text.partition("=")[2], "str")
    if word.maybe:
        raise ScriptError(name, word.line, f"{ESTIMATOR}={conventions.one_line(value, 40)} is {word.maybe}: the "
                          "workload depends on it; set it in the script")
    if value in estimators():
        return estimators()[value], f"{module} with {ESTIMATOR}={value} -> workload {estimators()[value]}", None
    if not owned.ESTIMATOR_NAME.fullmatch(value):
        raise ScriptError(name, word.line, f"{ESTIMATOR}={conventions.one_line(value, 40)}: not an estimator's name")
    return "ppo", (f"{module} with {ESTIMATOR}={value} -> workload ppo, the estimator kept as an override (verl runs "
                   f"it with PPO's trainer; its critic only with gae)"), value


def convert(text, name, command=None, spec_name=None):
    """The spec one trainer command of a script's text makes (command: its number, when the script has several;
    spec_name: the name it is written under, for the file's own comment)."""
    script = verl_script.read_script(text, name, command)
    trainer = _choose(script, command, name)
    job = _Import(name, trainer)
    args = list(trainer.args)
    for at, word in enumerate(args):
        u = word.unknowns[0] if _key(word)[0] is None else None
        flag_value = at and args[at - 1].text in _CONFIG_NAME + _CONFIG_PATH  # said by flag() below
        if u is not None and not (u.args and len(word.pieces) == 1) and not flag_value:
            where = f"line {u.line}: " if u.line != word.line else ""
            raise ScriptError(name, word.line, f"{u.raw} ({where}{u.why}) may hand the trainer any key, the estimator "
                              "and the others the spec owns too: set it in the script, or take it out and give what it "
                              "holds as -e overrides")
    workload, said, kept_estimator = _workload(trainer, args, name)
    job.spec["workload"] = workload
    job.say(trainer.command.line, f"trainer command {trainer.number} of {len(script.trainers)}: {said}")
    if trainer.command.maybe:
        job.say(trainer.command.line, f"the trainer command runs only {trainer.command.maybe}")
    _launcher(job, trainer)
    for name_, var in trainer.env.items():
        job.env(name_, var)
    estimator_words = [w for w in args if (_key(w)[0] or "").lstrip("+") == ESTIMATOR]
    aliases = ALIASES.get(workload, {})
    while args:
        word = args.pop(0)
        key, eq = _key(word)
        if key is None:  # the script's own arguments, $@: read as none
            job.say(word.line, f"{word.unknowns[0].raw}: left out: {word.unknowns[0].why}; give yours to the spec "
                    "as overrides")
        elif word.text.startswith("-"):
            job.flag(word, args, workload, trainer.module)
        elif (not eq or not key) and not word.text.startswith("~"):  # ~key alone is hydra's deletion
            why = job.note(word.pieces, word.line)
            job.say(word.line, f"{word.text}: left out: not a key=value override" + (f" ({why})" if why else ""))
        elif key.lstrip("+") == ESTIMATOR:
            if kept_estimator is None:
                job.say(word.line, f"{key} -> workload {workload}")
            elif word is estimator_words[-1]:
                job.override(word, workload)
            else:
                job.say(word.line, f"{key}: left out: line {estimator_words[-1].line}'s {ESTIMATOR} wins")
        elif key in aliases:
            job.owned_key(word, aliases[key], word.text.partition("=")[2], workload, alias=key)
        elif key in owned.OWNED_KEYS:  # +key, ++key and ~key stay overrides (which the spec refuses on owned keys)
            job.owned_key(word, key, word.text.partition("=")[2], workload)
        else:
            job.override(word, workload)
    for line, redirect in trainer.command.redirects:
        job.say(line, f"{redirect}: left out: a redirection (the job's record keeps its driver log)")
    others = [other for other in script.commands if other is not trainer.command]
    for other in others[:OTHERS_SHOWN]:
        job.say(other.line, f"{verl_launch.command_name(other)}: left out: not the trainer command imported, never run")
    if len(others) > OTHERS_SHOWN:
        job.lines.append(f"{len(others) - OTHERS_SHOWN} more commands (up to line {others[-1].line}): left out, never "
                         "run")
    for default, lines in sorted(job.defaults.items(), key=lambda kv: (kv[0].line, kv[0].name)):
        job.lines.append(f"line {default.line}: {default.name} is not set by the script: its default there is taken "
                         f"(used on line {', '.join(map(str, sorted(lines)))})")
    if job.defaults:
        job.lines.append("the defaults taken are the script's own: where your environment set those names when you "
                         "ran it, give their values to the spec (or with -e)")
    for (raw, why), lines in job.unknown.items():
        job.lines.append(f"{conventions.one_line(raw, 80)} (line {', '.join(map(str, sorted(lines)))}): {why}: "
                         "left as the script wrote it, for you")
    job.spec["overrides"] = [t for t, why in job.overrides if why is None]
    spec = {k: job.spec[k] for k in _ORDER if k in job.spec}
    return Imported(spec, _yaml(spec, job, name, spec_name or "<this file's name>"), job.lines, workload, trainer,
                    job.derived)


def _launcher(job, trainer):
    """The words before the module: torchrun's size flags become resources; the rest is Ray's to decide."""
    words, rest = list(trainer.launcher), []
    while words:
        word = words.pop(0)
        flag, eq, value = word.text.partition("=")
        if flag in LAUNCHER_SIZE and (eq or words):
            value_word = word if eq else words.pop(0)
            text = value if eq else value_word.text
            job.set_field(flag, LAUNCHER_SIZE[flag], value_word, text, word.line)
        else:  # an env NAME=value before the trainer is its environment (said above), never shown here
            assign = verl_script.ASSIGN.match(word.text)
            rest.append(f"{assign.group(1)}=..." if assign else word.text)
    if rest:
        job.say(trainer.command.line, f"{' '.join(rest)}: left out: the launcher (Ray starts the trainer with the "
                "cluster's ray_config.python)")


def _scalar(value):
    """One YAML scalar on one line (JSON's double-quoted form when YAML's would take more)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=False)
    text = text[:-5] if text.endswith("\n...\n") else text.rstrip("\n")
    return text if "\n" not in text else json.dumps(value)


def _yaml(spec, job, name, spec_name):
    """The spec file: the spec, and each value left for the user as a comment at its place, with why."""
    out = ["# yaml-language-server: $schema=../jobspec.schema.json", "#",
           (f"# Imported by import.yml from {json.dumps(name)}, trainer command {job.trainer.number} "
            f"(line {job.trainer.command.line}): {job.trainer.module}."),
           "# Lines '# key: value  # line N: why' hold what the script gave that the spec could not take as it is:",
           "# settle them here (or let the site's jobspec_defaults or -e give them), then run",
           f"# ansible-playbook submit.yml -e spec={spec_name} --check"]
    fields = {k: v for k, v in spec.items() if k not in ("env", "overrides")}
    out += yaml.safe_dump(fields, sort_keys=False, default_flow_style=False, width=1 << 30,
                          allow_unicode=False).splitlines()
    for key, value, why in job.left["fields"]:
        out.append(f"# {key}: {json.dumps(value)}  # {why}")
    if "env" in spec or job.left["env"]:
        out.append("env:" if "env" in spec else "# env:")
        out += [f"  {_scalar(k)}: {_scalar(v)}" for k, v in spec.get("env", {}).items()]
        out += [f"#   {k}: {'' if v is None else json.dumps(v)}  # {why}" for k, v, why in job.left["env"]]
    out.append("overrides:" if spec["overrides"] else "overrides: []")
    out += [f"  - {_scalar(t)}" if why is None else f"  # - {json.dumps(t)}  # {why}" for t, why in job.overrides]
    text = "\n".join(out) + "\n"
    if len(text.encode()) > safe_yaml.MAX_BYTES:
        raise ScriptError(name, None, f"the spec made from it would be larger than {safe_yaml.MAX_BYTES} bytes "
                          f"({len(job.overrides)} overrides, {len(job.lines)} lines of report): not a launch script")
    # What is written reads back as this spec, and validates: never a template, never a surprise. Its comment lines
    # are left out of the reading (YAML skips them anyway; each is one line, its values JSON-escaped).
    data = "\n".join(line for line in out if not line.lstrip().startswith("#")) + "\n"
    try:
        again = safe_yaml.load_text(data, name)
        check_fields(SPEC_FIELDS, again, "", complete=False)
        owned.check_env(again.get("env", {}))
        owned.check_overrides(again["overrides"], again["workload"])
    except (safe_yaml.YamlError, JobSpecError) as err:
        raise ScriptError(name, None, f"the spec made from it does not read back ({err}): a bug of import.yml")
    if again != spec:
        raise ScriptError(name, None, "the spec made from it does not read back as made: a bug of import.yml")
    return text


def write(text, spec_name, specs_dir, force=False):
    """Write <specs_dir>/<spec_name>.yaml: never over an existing file unless force. Its path."""
    if not conventions.matches(conventions.NAME_RULE, spec_name):
        raise ScriptError("spec", None, f"must be a spec name: {conventions.NAME_RULE[1]}")
    path = os.path.join(specs_dir, spec_name + ".yaml")
    if os.path.lexists(path) and not force:
        raise ScriptError(path, None, "exists: -e force=true overwrites it")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=specs_dir, prefix=f".{spec_name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails when the file appeared meanwhile: never overwritten
    except FileExistsError:
        raise ScriptError(path, None, "exists: -e force=true overwrites it") from None
    except OSError as err:
        raise ScriptError(path, None, f"cannot write it ({err.strerror})") from None
    finally:
        if tmp and os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def import_script(script, spec_name, specs_dir, command=None, force=False, write_file=True):
    """Read a script (never run), make its spec and write it: (Imported, path written or None)."""
    if not conventions.matches(conventions.NAME_RULE, spec_name):
        raise ScriptError("spec", None, f"must be a spec name: {conventions.NAME_RULE[1]}")
    path = os.path.join(specs_dir, spec_name + ".yaml")
    if os.path.lexists(path) and not force:  # said before the script is read: the first thing to settle
        raise ScriptError(path, None, "exists: -e force=true overwrites it")
    imported = convert(verl_script.read(script), script, command, spec_name)
    return imported, write(imported.text, spec_name, specs_dir, force) if write_file else None
