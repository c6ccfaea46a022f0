"""The generator of every command's flags: a dataclass field is the absl flag and the YAML key.

A command's config is a frozen dataclass of `setting(...)` fields (a `Settings`); the
field's name, type, default, help and range are the absl flag (`Settings.define_flags`)
and the key of a `--config_file` YAML (`apply_config_file`); `Settings.from_flags` reads
the config back. A field without `help` is no flag (a library-only knob). The text groups
of every command that reads text (`TextSettings`, `PreTokenizerSetting`,
`CorpusTextSettings`) are declared here; the groups on the bert_tf library (model dir,
training, task) are in `bert_tf.app.settings`.

    >>> @dataclasses.dataclass(frozen=True, kw_only=True)
    ... class Copy(Settings):
    ...     source: str = setting(REQUIRED, "From where.")
    ...     copies: int = setting(1, "How many.", lower=1)
    ...     name: Optional[str] = setting(None, "Who.")
    >>> fv = flags.FlagValues()
    >>> Copy.define_flags(fv)
    >>> _ = fv(["copy", "--source=a", "--copies=3"])
    >>> Copy.from_flags(fv)
    Copy(source='a', copies=3, name=None)

Core layer: imports absl, yaml and the core modules only (no TensorFlow on import;
`apply_config_file` reads through tf.io.gfile when called), so the TF-free data_prep
modules declare their settings with it (`data_prep.pretraining_passes.JobConfig`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable, Iterable, Optional, Sequence

import yaml
from absl import flags

from bert_tf.core.errors import UsageError
from bert_tf.text.pre_tokenizers import PRE_TOKENIZERS

_RELATIVE_TO_YAML = ("bert_config_file", "vocab_file")
_NOT_GIVEN = object()


class _Required:
    def __repr__(self):
        return "REQUIRED"


# The default of a setting the command refuses to run without (`Settings.from_flags`
# names the missing flag); the field then has no default in the library either.
REQUIRED: Any = _Required()


# ------------------------------------------------------------------------- the generator
def setting(default: Any = None, help: str = "", *, lower: Optional[float] = None,
            upper: Optional[float] = None, choices: Any = None,
            flag_default: Any = _NOT_GIVEN) -> dataclasses.Field:
    """A config field that is also a flag and a YAML key.

    `lower`/`upper`: the flag's range (absl bounds: a value outside is refused with one
    line naming the flag and the range, on the command line and in a YAML). `choices`: an
    enum's values, or a function returning them (read when the flag is defined, so a
    list that lives beside TensorFlow loads it only then). `flag_default`: the default
    the flag shows while the field holds `default` unless the flag is given (`given`):
    for a value settled later (a model dir's recorded casing, a task's own length).
    `default=REQUIRED`: a field with no default whose flag must be given.
    """
    metadata = {"help": help, "lower": lower, "upper": upper, "choices": choices}
    if flag_default is not _NOT_GIVEN:
        metadata["flag_default"] = flag_default
    if default is REQUIRED:
        return dataclasses.field(metadata=dict(metadata, required=True))
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def override(group: type, name: str, default: Any = _NOT_GIVEN, *,
             help: Optional[str] = None, **metadata) -> dataclasses.Field:
    """`group`'s field `name` with another default, help or range: how one command's
    config declares what differs for it (finetune's --num_train_steps default)."""
    field = next(f for f in dataclasses.fields(group) if f.name == name)
    values = dict(field.metadata)
    required = values.pop("required", False)
    values.update(metadata)
    if help is not None:
        values["help"] = help
    if default is _NOT_GIVEN:
        default = REQUIRED if required else field.default
    return setting(default, values.pop("help"), **values)


def _is_flag(field: dataclasses.Field) -> bool:
    return "help" in field.metadata


def _kind(annotation) -> str:
    """bool, int, float, str or list, from a field's annotation (a string under
    `from __future__ import annotations`).

    >>> [_kind(t) for t in ("Optional[bool]", "int", "float", "Optional[str]", "List[str]")]
    ['bool', 'int', 'float', 'str', 'list']
    """
    text = (annotation if isinstance(annotation, str) else
            annotation.__name__ if isinstance(annotation, type) else str(annotation))
    if re.search(r"\b(List|Sequence|list)\[", text):
        return "list"
    for kind in ("bool", "int", "float", "str"):
        if re.search(rf"\b{kind}\b", text):
            return kind
    raise TypeError(f"a setting of type {text}: expected bool, int, float, str or List[str]")


def define_flag(field: dataclasses.Field, flag_values: flags.FlagValues) -> None:
    """The absl flag of one `setting` field."""
    meta = field.metadata
    default = meta.get("flag_default", field.default)
    if meta.get("required"):
        default = None  # absl's "not given"; `Settings.from_flags` refuses it
    elif default is dataclasses.MISSING:
        default = field.default_factory()
    common = {"flag_values": flag_values}
    kind = _kind(field.type)
    choices = meta["choices"]
    if choices is not None:
        choices = list(choices() if callable(choices) else choices)
        flags.DEFINE_enum(field.name, default, choices, meta["help"], **common)
    elif kind == "list":
        flags.DEFINE_list(field.name, list(default), meta["help"], **common)
    elif kind == "bool":
        flags.DEFINE_bool(field.name, default, meta["help"], **common)
    elif kind in ("int", "float"):
        bounds = {k: v for k, v in (("lower_bound", meta["lower"]),
                                    ("upper_bound", meta["upper"])) if v is not None}
        define = flags.DEFINE_integer if kind == "int" else flags.DEFINE_float
        define(field.name, default, meta["help"], **bounds, **common)
    else:
        flags.DEFINE_string(field.name, default, meta["help"], **common)


def given(flag_values: flags.FlagValues, name: str):
    """The flag's value when given (command line, --config_file or assigned), else None:
    the one test of "was this flag given", e.g. for `model_dir.resolve`, whose record
    a flag's default must never hide (the trainers' --do_lower_case default).

    >>> fv = flags.FlagValues()
    >>> _ = flags.DEFINE_bool("do_lower_case", True, "", flag_values=fv)
    >>> _ = fv(["prog"]); given(fv, "do_lower_case") is None
    True
    >>> _ = fv(["prog", "--do_lower_case"]); given(fv, "do_lower_case")
    True
    """
    return None if flag_values[name].using_default_value else flag_values[name].value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """The base of every command's config: its `setting` fields are its flags."""

    @classmethod
    def define_flags(cls, flag_values: flags.FlagValues = flags.FLAGS) -> None:
        """Defines a flag for each `setting` field not defined yet (idempotent)."""
        for field in dataclasses.fields(cls):
            if _is_flag(field) and field.name not in flag_values:
                define_flag(field, flag_values)

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = flags.FLAGS, **values):
        """`cls(**values)`, each other `setting` field from its flag (a field with a
        `flag_default` only when the flag was given, `given`; else its own default).
        The one place a command turns its flags into its run's config. Raises
        UsageError naming the first REQUIRED flag not given."""
        require(flag_values, [f.name for f in dataclasses.fields(cls)
                              if f.metadata.get("required") and f.name not in values
                              and f.name in flag_values])
        for field in dataclasses.fields(cls):
            if field.name in values or not _is_flag(field) or field.name not in flag_values:
                continue
            value = (given(flag_values, field.name) if "flag_default" in field.metadata
                     else flag_values[field.name].value)
            if value is not None or "flag_default" not in field.metadata:
                values[field.name] = value
            # else: the field keeps its own default (the flag only shows another one)
        return cls(**values)


def apply_config_file(flag_values: flags.FlagValues = flags.FLAGS,
                      path: Optional[str] = None) -> dict:
    """Sets flags from the `--config_file` YAML unless given on the command line.

    The YAML's keys are the flags' names (official_configs/pretraining or /finetuning);
    relative `bert_config_file` / `vocab_file` paths are resolved against the YAML's own
    directory when they exist there. Returns the values taken from the file. Raises
    UsageError (a ValueError) naming the file and key for a key that is no flag or a
    value of the wrong type or out of the flag's range.
    """
    path = path or flag_values["config_file"].value
    if not path:
        return {}
    import tensorflow as tf  # gs:// too; TF-free module (TensorFlow: 9 s)

    if not tf.io.gfile.exists(path):
        raise UsageError(f"--config_file={path}: no such file")
    with tf.io.gfile.GFile(path) as f:
        try:
            values = yaml.safe_load(f.read()) or {}
        except yaml.YAMLError as e:
            raise UsageError(f"--config_file={path}: not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise UsageError(f"--config_file={path}: expected `flag_name: value` pairs")
    applied = {}
    for name, value in values.items():
        if name not in flag_values:
            raise UsageError(f"--config_file={path}: `{name}` is not a flag of this command")
        flag = flag_values[name]
        if flag.present:
            continue  # the command line wins
        if name in _RELATIVE_TO_YAML and isinstance(value, str) and not os.path.isabs(value):
            beside = os.path.normpath(os.path.join(os.path.dirname(path), value))
            if os.path.exists(beside):
                value = beside
        try:
            flag.value = flag.parser.parse(value) if value is not None else None
        except (ValueError, TypeError) as e:
            raise UsageError(f"--config_file={path}: `{name}: {value!r}`: {e}") from None
        flag.using_default_value = False  # given, as on the command line (`given`)
        applied[name] = flag.value
    return applied


def require(flag_values: flags.FlagValues, names: Iterable[str]) -> None:
    """Raises UsageError naming the first missing flag."""
    for name in names:
        if flag_values[name].value in (None, ""):
            where = " or in --config_file" if "config_file" in flag_values else ""
            raise UsageError(f"--{name} is required (on the command line{where})")


def parse_args(define_flags: Callable[[flags.FlagValues], None],
               argv: Sequence[str]) -> flags.FlagValues:
    """A command's flags parsed from `argv` (without the program name) on a fresh
    FlagValues, with --config_file applied: how tests and scripts build a run's config
    without a process (`FinetuneConfig.from_flags(parse_args(finetune.define_flags, [...]))`).

    >>> parse_args(CorpusTextSettings.define_flags, ["--nodo_lower_case"]).do_lower_case
    False
    """
    fv = flags.FlagValues()
    define_flags(fv)
    fv(["prog", *argv])
    if "config_file" in fv:
        apply_config_file(fv)
    return fv


# ------------------------------------------------------------------- the text groups
STRIP_ACCENTS_HELP = (
    "Strip accents (NFD, drop combining marks). Default: as --do_lower_case (the original "
    "BERT). --nostrip_accents with --do_lower_case lower-cases but keeps accents and Hangul "
    "syllables whole (text NFC-normalized; for Korean: uncased stripping splits every "
    "syllable into jamo). Recorded in the model directory.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextSettings(Settings):
    """How text is cut before WordPiece, wherever a vocab is used; model dirs record
    them in tokenizer_config.json (`bert_tf.model.model_dir`). None: not given."""
    do_lower_case: Optional[bool] = setting(
        None, "Lower-case input; default: as --init_checkpoint records it, else inferred "
        "from the vocab.")
    strip_accents: Optional[bool] = setting(None, STRIP_ACCENTS_HELP)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreTokenizerSetting(Settings):
    """--pre_tokenizer, for the commands that read a corpus (and pretrain, which records
    it); elsewhere a model dir's record gives it. First among a config's bases, so its
    field is the flag that `ModelDirSettings`' plain one gives way to."""
    pre_tokenizer: Optional[str] = setting(
        None, "Split text into morphemes before the basic tokenizer (Korean; kiwi = "
        "kiwipiepy, pip install -r requirements-korean.txt). Use the same value for "
        "build_vocab, create_pretraining_data and pretrain (which records it); serving "
        "clients split text the same way (python -m bert_tf.pre_tokenizers).",
        choices=PRE_TOKENIZERS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusTextSettings(PreTokenizerSetting, TextSettings):
    """The text settings of the commands that read a corpus with no model dir to follow
    (data_prep.create_pretraining_data, build_vocab): uncased unless told."""
    do_lower_case: bool = override(
        TextSettings, "do_lower_case", True,
        help="Lower-case (and strip accents, unless --nostrip_accents) before reading the "
        "corpus (an uncased model); --nodo_lower_case for cased models. For Korean use "
        "--do_lower_case --nostrip_accents (or --nodo_lower_case): stripping splits Hangul "
        "syllables into jamo.")
