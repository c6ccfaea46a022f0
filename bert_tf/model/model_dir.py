"""The model directory: what convert_checkpoint, pretrain and finetune write.

Every command that takes `--init_checkpoint=DIR` reads this layout:

    DIR/bert_config.json        BertConfig (original field names)
    DIR/vocab.txt               WordPiece vocab, when known
    DIR/tokenizer_config.json   {"do_lower_case": bool, "strip_accents": bool or null,
                                 "pre_tokenizer": "kiwi" (only when used)}, when known;
                                (`resolve` is how every command reads it)
    DIR/task_config.json        fine-tuned models only: task name, labels, max_seq_length
                                (`write_task_config`)
    DIR/eval_results.json       the last evaluation's metrics (`write_eval_results`)
    DIR/checkpoint, DIR/ckpt-N.{index,data-*}
                                a tf.train.Checkpoint whose root children are named
                                `encoder`, `masked_lm`, `next_sentence`, `task_head`,
                                `optimizer`, `step`, `input_seed` (each present when it
                                exists; the names are `bert_tf.core.constants.ENCODER`, ...)

`--init_checkpoint` may also name a checkpoint prefix (`DIR/ckpt-1200`) directly.

`resolve(DIR, **flags)` is THE way a command turns `--init_checkpoint=DIR` and its
`--bert_config_file` / `--vocab_file` / `--do_lower_case` / `--strip_accents` /
`--pre_tokenizer` flags into a `ResolvedModelDir`; each value comes from the first of

    1. the flag, when given (not None);
    2. the model directory's metadata: bert_config.json (or config.json), vocab.txt,
       tokenizer_config.json, then the do_lower_case / strip_accents task_config.json
       records; DIR first, then the `fallbacks` (finetune: its --output_dir, to resume);
    3. inference from the vocab: do_lower_case from its tokens (`infer_do_lower_case`),
       strip_accents=False for an uncased vocab holding tokens stripping could never
       produce (`infer_strip_accents`);
    4. the default: do_lower_case=True, strip_accents None (follows do_lower_case),
       no pre-tokenizer; no config / vocab (`ResolvedModelDir.require` says what to pass).

Example:

>>> from bert_tf.model.config import BertConfig, ConfigError
>>> from bert_tf.model.encoder import BertEncoder
>>> import tempfile
>>> cfg = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16)
>>> d = tempfile.mkdtemp()
>>> _ = write_model_dir(d, cfg, {"encoder": BertEncoder(cfg)})
>>> load_encoder(d).config == cfg
True
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from typing import Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from bert_tf.core import output_guard  # each file whole or not at all (docs/contracts.md §6)
from bert_tf.core.constants import ENCODER, PRETRAINING_HEADS, TASK_HEAD
from bert_tf.core.errors import BertTfError
from bert_tf.model.config import BertConfig, ConfigError
from bert_tf.model.encoder import BertEncoder
from bert_tf.text.text_rules import infer_do_lower_case, infer_strip_accents

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TASK_CONFIG_FILE = "task_config.json"
EVAL_RESULTS_FILE = "eval_results.json"


class CheckpointMismatchError(BertTfError, ValueError):
    """A checkpoint whose variables do not fit the model built from the config."""


class DamagedCheckpointError(BertTfError, ValueError):
    """Checkpoint files that are cut short or damaged (an interrupted copy or download)."""


_COPY_AGAIN = "copy or download the checkpoint again"


def check_checkpoint_files(prefix: str):
    """Checks that a TensorFlow checkpoint's index reads and its data files are all there
    and hold at least the bytes of the tensors the index lists (a cheap test of a cut
    short copy, before any tensor is read). Raises DamagedCheckpointError naming the file.

    Returns the index reader (`tf.train.load_checkpoint`), so that callers read the
    index once (variable names, shapes, dtypes).
    """
    check_checkpoint_path(prefix, "--init_checkpoint")
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise DamagedCheckpointError(
            f"{prefix}.index: cannot be read ({getattr(e, 'message', e)}); the checkpoint is "
            f"damaged or not a TensorFlow checkpoint: {_COPY_AGAIN}") from None
    shards = tf.io.gfile.glob(prefix + ".data-*-of-*")
    match = re.search(r"-of-(\d+)$", shards[0]) if shards else None
    expected = int(match.group(1)) if match else 1
    if len(shards) < expected:
        raise DamagedCheckpointError(
            f"{prefix}: {expected} data file(s) {prefix}.data-*-of-{expected:05d} expected, "
            f"{len(shards)} found: {_COPY_AGAIN}")
    dtypes = reader.get_variable_to_dtype_map()
    needed = 0
    for name, shape in reader.get_variable_to_shape_map().items():
        if dtypes[name] != tf.string:  # strings have no fixed size: a lower bound
            count = 1
            for dim in shape:
                count *= dim
            needed += count * dtypes[name].size
    have = sum(tf.io.gfile.stat(path).length for path in shards)
    if have < needed:
        raise DamagedCheckpointError(
            f"{', '.join(sorted(shards))}: {have:,} bytes, but the index lists {needed:,} "
            f"bytes of tensors: the checkpoint is cut short (an interrupted copy or "
            f"download?): {_COPY_AGAIN}")
    return reader


_GLOB_CHARACTERS = "[]*?"


def check_checkpoint_path(path: str, flag: str) -> None:
    """Raises ModelDirError when `path` holds a glob character: TensorFlow's checkpoint
    reader takes a checkpoint path as a pattern, so `runs[1]/ckpt-5` would read as
    missing (or as a damaged checkpoint). Said before anything is read or written.

    >>> check_checkpoint_path("runs[1]/out", "--output_dir")
    Traceback (most recent call last):
    ...
    bert_tf.model.model_dir.ModelDirError: --output_dir=runs[1]/out holds `[`, which TensorFlow's checkpoint reader takes as a pattern: rename the folder (no [ ] * ?)
    """
    found = next((c for c in path if c in _GLOB_CHARACTERS), None)
    if found:
        raise ModelDirError(f"{flag}={path} holds `{found}`, which TensorFlow's checkpoint "
                            f"reader takes as a pattern: rename the folder (no [ ] * ?)")


def damaged_checkpoint(prefix: str, error: Exception) -> DamagedCheckpointError:
    """The error to raise when reading a tensor of `prefix` failed (a checksum mismatch,
    a short read)."""
    message = getattr(error, "message", None) or str(error)
    message = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", message)  # graph op name
    return DamagedCheckpointError(f"{prefix}: cannot read the checkpoint's tensors "
                                  f"({message.splitlines()[0][:200]}); its data files are "
                                  f"damaged or cut short: {_COPY_AGAIN}")


def write_model_dir(output_dir: str, config: BertConfig, objects: Mapping[str, object], *,
                    vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
                    checkpoint_number: int = 0, strip_accents: Optional[bool] = None,
                    pre_tokenizer: Optional[str] = None,
                    task_config: Optional[dict] = None) -> str:
    """Writes config, vocab, tokenizer settings, the task config (a fine-tuned model, whose
    `objects` then include `task_head`) and a checkpoint of `objects`.

    Returns the checkpoint prefix. Existing checkpoints in `output_dir` are kept (the
    new one becomes the latest).
    """
    tf.io.gfile.makedirs(output_dir)
    write_metadata(output_dir, config, vocab_file=vocab_file, do_lower_case=do_lower_case,
                   strip_accents=strip_accents, pre_tokenizer=pre_tokenizer,
                   task_config=task_config)
    checkpoint = tf.train.Checkpoint(**objects)
    manager = tf.train.CheckpointManager(checkpoint, output_dir, max_to_keep=5)
    return manager.save(checkpoint_number=checkpoint_number)


def write_metadata(output_dir: str, config: BertConfig, *, vocab_file: Optional[str] = None,
                   do_lower_case: Optional[bool] = None, strip_accents: Optional[bool] = None,
                   pre_tokenizer: Optional[str] = None,
                   task_config: Optional[dict] = None) -> None:
    """Writes everything of a model dir but the checkpoint, each file whole.

    The tokenizer settings are written when `do_lower_case` is known (`strip_accents`
    None means "follows do_lower_case", as in Hugging Face's tokenizer_config.json).
    """
    tf.io.gfile.makedirs(output_dir)
    output_guard.write_text(os.path.join(output_dir, CONFIG_FILE), config.to_json_string())
    if vocab_file:
        target = os.path.join(output_dir, VOCAB_FILE)
        if os.path.abspath(vocab_file) != os.path.abspath(target):
            output_guard.copy_file(vocab_file, target)
    if do_lower_case is not None:
        settings = TokenizerConfig(bool(do_lower_case), strip_accents, pre_tokenizer)
        output_guard.write_text(os.path.join(output_dir, TOKENIZER_CONFIG_FILE),
                                json.dumps(settings.to_json()))
    if task_config is not None:
        write_task_config(output_dir, task_config)


def write_task_config(output_dir: str, task_config: dict) -> None:
    """Writes a fine-tuned model's task_config.json (`Task.task_config()`), whole or not
    at all, its keys in the task's order."""
    output_guard.write_json(os.path.join(output_dir, TASK_CONFIG_FILE), task_config,
                            sort_keys=False)


def write_eval_results(output_dir: str, results: Mapping[str, object]) -> None:
    """Writes eval_results.json (metric name -> number), whole or not at all: a reader
    (sweep reuses a point whose results exist) never sees half a file."""
    output_guard.write_json(os.path.join(output_dir, EVAL_RESULTS_FILE), dict(results))


def model_dir_of(path: str) -> str:
    """The directory a `--init_checkpoint` value points into."""
    return path if tf.io.gfile.isdir(path) else os.path.dirname(path)


def resolve_checkpoint(path: str) -> str:
    """A directory or checkpoint prefix -> the checkpoint prefix to restore.

    Raises FileNotFoundError saying what was looked for.
    """
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        # A directory with a single TF1-style checkpoint and no `checkpoint` state file.
        indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
        if len(indexes) == 1:
            return indexes[0][: -len(".index")]
        raise FileNotFoundError(
            f"{path}: no checkpoint found (expected a `checkpoint` state file or one "
            f"*.index file); write one with convert_checkpoint, pretrain or finetune")
    if tf.io.gfile.exists(path + ".index"):
        return path
    raise FileNotFoundError(f"{path}: no such checkpoint (neither a directory nor a "
                            f"checkpoint prefix with a .index file)")


def find_config(path: str) -> Optional[BertConfig]:
    """The BertConfig stored next to a checkpoint, or None."""
    directory = model_dir_of(path)
    for name in (CONFIG_FILE, "config.json"):
        candidate = os.path.join(directory, name)
        if tf.io.gfile.exists(candidate):
            return BertConfig.from_file(candidate)
    return None


def find_vocab(path: str) -> Optional[str]:
    candidate = os.path.join(model_dir_of(path), VOCAB_FILE)
    return candidate if tf.io.gfile.exists(candidate) else None


def _read_json_object(path: str, example: str) -> Optional[dict]:
    """A model dir's JSON file as a dict (None when absent); ConfigError naming the file
    when it is not a JSON object."""
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        try:
            values = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not valid JSON ({e}); fix or delete it") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a JSON object like {example}")
    return values


def read_tokenizer_config(path: str) -> dict:
    """The model dir's tokenizer_config.json as a dict ({} when there is none)."""
    return _read_json_object(os.path.join(model_dir_of(path), TOKENIZER_CONFIG_FILE),
                             '{"do_lower_case": true, "strip_accents": null}') or {}


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """How text becomes words for a model (what tokenizer_config.json records).

    `strip_accents` None follows `do_lower_case` (the original); `pre_tokenizer` names
    a `bert_tf.text.pre_tokenizers` splitter the text went through first, or None.
    """
    do_lower_case: bool = True
    strip_accents: Optional[bool] = None
    pre_tokenizer: Optional[str] = None

    def to_json(self) -> dict:
        out = {"do_lower_case": bool(self.do_lower_case),
               "strip_accents": None if self.strip_accents is None else bool(self.strip_accents)}
        if self.pre_tokenizer:
            out["pre_tokenizer"] = self.pre_tokenizer
        return out

    def tokenizer_kwargs(self) -> dict:
        """Keyword arguments of BertTokenizer / WordPieceTokenizer / BasicTokenizer."""
        return {"do_lower_case": bool(self.do_lower_case), "strip_accents": self.strip_accents}


def read_task_config(path: str) -> Optional[dict]:
    """A fine-tuned model dir's task_config.json (None for other model dirs)."""
    return _read_json_object(os.path.join(model_dir_of(path), TASK_CONFIG_FILE),
                             '{"task_name": "MRPC", "label_list": ["0", "1"]}')


class ModelDirError(BertTfError, FileNotFoundError):
    """A model directory (or the flags naming its files) that lacks what a command needs."""


def _explicit_file(path: Optional[str], flag: str) -> Optional[str]:
    if path and not tf.io.gfile.exists(path):
        raise ModelDirError(f"--{flag}={path}: no such file")
    return path


@dataclasses.dataclass(frozen=True)
class ResolvedModelDir:
    """What `resolve` settled: config, vocab, text settings, task config, checkpoint.

    `checkpoint` (the prefix to restore) and `reader` (its verified index, read once)
    are looked up when first used, so a command that needs only the metadata (e.g.
    create_finetuning_data) never touches the checkpoint.
    """
    path: Optional[str]
    config: Optional[BertConfig]
    vocab_file: Optional[str]
    text: TokenizerConfig
    task_config: Optional[dict] = None

    @property
    def directory(self) -> Optional[str]:
        return model_dir_of(self.path) if self.path else None

    @functools.cached_property
    def checkpoint(self) -> str:
        """The checkpoint prefix (FileNotFoundError saying what was looked for)."""
        if not self.path:
            raise ModelDirError("no --init_checkpoint: name a model dir or checkpoint prefix")
        return resolve_checkpoint(self.path)

    @functools.cached_property
    def reader(self):
        """The checkpoint's index reader, after `check_checkpoint_files`."""
        return check_checkpoint_files(self.checkpoint)

    @property
    def heads(self) -> tuple:
        """The heads the checkpoint holds besides the encoder: `masked_lm` /
        `next_sentence` (pretrain, convert_checkpoint) by their variables, `task_head`
        when task_config.json says the dir was fine-tuned (a head's variables may be
        listed under `optimizer/...` only)."""
        children = {name.split("/")[0] for name in self.reader.get_variable_to_shape_map()}
        found = tuple(h for h in PRETRAINING_HEADS if h in children)
        return found + ((TASK_HEAD,) if self.task_config is not None else ())

    def require(self, *, config: bool = True, vocab: bool = False) -> "ResolvedModelDir":
        """Raises ModelDirError naming the directory and the flag to pass when the config
        (or, with `vocab`, the vocab) was found nowhere; returns self."""
        missing = [(name, flag) for name, flag, wanted, have in (
            (CONFIG_FILE, "--bert_config_file", config, self.config),
            (VOCAB_FILE, "--vocab_file", vocab, self.vocab_file)) if wanted and not have]
        if missing:
            where = self.directory or "no --init_checkpoint"
            if self.path and not (tf.io.gfile.isdir(self.path)
                                  or tf.io.gfile.exists(self.path + ".index")):
                where = f"{self.path} (no such directory or checkpoint)"
            raise ModelDirError(
                f"{where}: needs {' and '.join(n for n, _ in missing)} (a model dir written "
                f"by convert_checkpoint, pretrain or finetune holds them); or pass "
                f"{' and '.join(f for _, f in missing)}")
        return self

    def tokenizer(self):
        """The in-graph BertTokenizer over the vocab, with the resolved text settings."""
        from bert_tf.text.tokenization import BertTokenizer  # TF Text loads with it: 1.3 s

        self.require(config=False, vocab=True)
        return BertTokenizer(self.vocab_file, **self.text.tokenizer_kwargs())

    def check_max_seq_length(self, max_seq_length: int) -> None:
        """Raises ModelDirError when the config's position table is shorter."""
        if self.config is not None and max_seq_length > self.config.max_position_embeddings:
            raise ModelDirError(f"--max_seq_length={max_seq_length} exceeds the model's "
                                f"max_position_embeddings="
                                f"{self.config.max_position_embeddings}")


def resolve(path: Optional[str], *, bert_config_file: Optional[str] = None,
            vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
            strip_accents: Optional[bool] = None, pre_tokenizer: Optional[str] = None,
            fallbacks: Sequence[Optional[str]] = ()) -> ResolvedModelDir:
    """THE resolution of `--init_checkpoint=path` and the flags that override it (the
    order of precedence is in the module docstring). Arguments left None are not given.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); v = os.path.join(d, VOCAB_FILE)
    >>> _ = open(v, "w").write("[PAD]\\n[UNK]\\nHello\\n")
    >>> cfg = BertConfig(vocab_size=3, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16)
    >>> write_metadata(d, cfg)                       # no casing recorded
    >>> r = resolve(d)
    >>> r.config == cfg, r.vocab_file == v, r.text.do_lower_case   # inferred: cased vocab
    (True, True, False)
    >>> resolve(d, do_lower_case=True).text.do_lower_case          # the flag wins
    True
    """
    places = [p for p in (path, *fallbacks) if p and tf.io.gfile.exists(model_dir_of(p))]
    config = BertConfig.from_file(_explicit_file(bert_config_file, "bert_config_file")) \
        if bert_config_file else None
    vocab = _explicit_file(vocab_file, "vocab_file")
    for place in places:
        config = config or find_config(place)
        vocab = vocab or find_vocab(place)
    task_config = read_task_config(path) if path in places else None
    recorded = []  # text settings in order: each dir's tokenizer_config, then task_config
    for place in places:
        recorded.append(read_tokenizer_config(place))
        task = task_config if place == path else read_task_config(place)
        recorded.append({k: task[k] for k in ("do_lower_case", "strip_accents")
                         if k in (task or {})})
    text = _resolve_text(recorded, vocab, do_lower_case, strip_accents, pre_tokenizer)
    return ResolvedModelDir(path, config, vocab, text, task_config)


def _resolve_text(recorded: Sequence[dict], vocab_file: Optional[str],
                  do_lower_case: Optional[bool], strip_accents: Optional[bool],
                  pre_tokenizer: Optional[str]) -> TokenizerConfig:
    """Steps 1-4 of the precedence for the text settings (`recorded`: step 2's dicts)."""
    def first(name, given):
        if given is not None:
            return given, True
        for values in recorded:
            if name in values and (name != "pre_tokenizer" or values[name]):
                return values[name], True
        return None, False

    lower, known = first("do_lower_case", do_lower_case)
    if not known:
        lower = infer_do_lower_case(vocab_file) if vocab_file else True
    strip, known = first("strip_accents", strip_accents)
    if not known and lower and vocab_file:
        strip = infer_strip_accents(vocab_file)
    pre, _ = first("pre_tokenizer", pre_tokenizer)
    return TokenizerConfig(bool(lower), None if strip is None else bool(strip), pre or None)


_SHAPE_ERROR = re.compile(r"shape \(([^)]*)\) when attempting to restore variable with "
                          r"shape \(([^)]*)\) and name ([^\s]+?)(:0)?\.?$")


def restore(path, objects: Mapping[str, object], *, require_all: bool = True,
            checkpoint: Optional[tf.train.Checkpoint] = None):
    """Restores `objects` (root-child name -> trackable) from a checkpoint.

    `path` is a model dir, a checkpoint prefix or a `ResolvedModelDir` (whose verified
    index is then reused). Only the named children are read (a pretraining checkpoint
    can seed a classifier).
    Raises CheckpointMismatchError naming the variable and both shapes when the
    checkpoint does not fit, and, with `require_all`, when a variable of `objects` has
    no value in the checkpoint or the checkpoint holds more encoder layers.
    `checkpoint`: the caller's own tf.train.Checkpoint of `objects` (a Trainer's, whose
    save counter must continue), read instead of a new one.
    Returns the checkpoint prefix restored.
    """
    if isinstance(path, ResolvedModelDir):
        prefix, reader = path.checkpoint, path.reader
    else:
        prefix = resolve_checkpoint(path)
        reader = check_checkpoint_files(prefix)
    _check_layer_count(prefix, objects, reader)
    checkpoint = checkpoint or tf.train.Checkpoint(**objects)
    try:
        status = checkpoint.read(prefix)
    except (tf.errors.DataLossError, tf.errors.OutOfRangeError, IndexError) as e:
        raise damaged_checkpoint(prefix, e) from None
    except (ValueError, tf.errors.InvalidArgumentError) as e:
        match = _SHAPE_ERROR.search(str(e).strip())
        if match:
            saved, wanted, name = _shape(match.group(1)), _shape(match.group(2)), match.group(3)
            raise CheckpointMismatchError(
                f"{prefix}: variable `{name}` has shape {saved} in the checkpoint but "
                f"{wanted} in the model built from the config; use the config the "
                f"checkpoint was trained with") from None
        raise CheckpointMismatchError(f"{prefix}: cannot restore: {e}") from None
    if require_all:
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            status.expect_partial()  # no "Value in checkpoint could not be found" flood
            raise CheckpointMismatchError(
                f"{prefix}: the checkpoint lacks variables the model needs "
                f"({str(e).splitlines()[0][:300]}); is it a bert_tf checkpoint of this "
                f"model (convert TF1/Hugging Face ones with convert_checkpoint)?") from None
    status.expect_partial()
    return prefix


def _shape(text: str) -> list:
    """'16, 32' or '16,' (TF's tuple text) -> [16, 32] / [16]."""
    return [int(d) for d in text.replace(" ", "").split(",") if d]


def _check_layer_count(prefix: str, objects: Mapping[str, object], reader) -> None:
    encoder = objects.get(ENCODER)
    if encoder is None or not hasattr(encoder, "config"):
        return
    layers = {int(m.group(1)) for name in reader.get_variable_to_shape_map()
              for m in [re.match(r"encoder/layer_(\d+)/", name)] if m}
    if layers and max(layers) + 1 != encoder.config.num_hidden_layers:
        raise CheckpointMismatchError(
            f"{prefix}: the checkpoint has {max(layers) + 1} encoder layers but the config "
            f"asks for num_hidden_layers={encoder.config.num_hidden_layers}")


@dataclasses.dataclass(frozen=True)
class StartPoint:
    """What a run restored from --init_checkpoint before its first step: the checkpoint
    prefix and the root children read from it (printed as the log line says it)."""
    prefix: str
    children: Tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.prefix} ({' + '.join(self.children)})"


def restore_start_point(resolved: ResolvedModelDir, objects: Mapping[str, object], *,
                        optional: Sequence[str] = ()) -> StartPoint:
    """THE restore of a run's start point (`--init_checkpoint`, resolved): every child of
    `objects` must be in the checkpoint whole, except those named in `optional` (the
    pretraining heads), which are restored when the checkpoint has them. Never the
    training state (optimizer, step): a start point begins at step 0.

    >>> import tempfile
    >>> from bert_tf.model.pretrainer import BertPretrainer
    >>> cfg = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16)
    >>> d = tempfile.mkdtemp(); model = BertPretrainer(cfg)
    >>> _ = write_model_dir(d, cfg, {ENCODER: model.encoder})     # no heads
    >>> restore_start_point(resolve(d), model.checkpoint_items(),
    ...                     optional=PRETRAINING_HEADS).children
    ('encoder',)
    """
    required = {k: v for k, v in objects.items() if k not in optional}
    restore(resolved, required)
    present = {k: v for k, v in objects.items() if k in optional and k in resolved.heads}
    if present:
        restore(resolved, present, require_all=False)
    return StartPoint(resolved.checkpoint, (*required, *present))


def load_encoder(path, config: Optional[BertConfig] = None, dtype=None):
    """Builds a BertEncoder from the config in a model dir and restores its weights.

    `path` is a directory written by convert_checkpoint, pretrain or finetune (or a
    checkpoint prefix inside one, or a `ResolvedModelDir`). `config` overrides the
    stored config (e.g. dropout).
    """
    resolved = path if isinstance(path, ResolvedModelDir) else resolve(path)
    config = config or resolved.require().config
    encoder = BertEncoder(config, dtype=dtype, name=ENCODER)
    restore(resolved, {ENCODER: encoder})
    return encoder
