"""Hugging Face BERT weights: import and export.

    read_huggingface(path)           `model.safetensors` (sharded too) / `pytorch_model.bin`
    write_huggingface(weights, dir)  -> `config.json` + `model.safetensors` + `vocab.txt` +
                                        `tokenizer_config.json` (BertModel, BertForPreTraining
                                        or the fine-tuned task's BertFor* class)

Hugging Face's `gelu` is the exact form, which is our `gelu`; our `gelu_approximate` is
their `gelu_new`.

>>> import tempfile
>>> from bert_tf.checkpoints.weights import weights_from_model
>>> from bert_tf.model.pretrainer import BertPretrainer
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16)
>>> path = write_huggingface(weights_from_model(BertPretrainer(cfg), do_lower_case=True),
...                          tempfile.mkdtemp())
>>> back = read_huggingface(path)
>>> back.config == cfg, back.heads, back.do_lower_case
(True, ('masked_lm', 'next_sentence'), True)
"""

from __future__ import annotations

import json
import os
import re
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from bert_tf import tasks
from bert_tf.core import constants, file_io
from bert_tf.model import model_dir
from bert_tf.text import text_rules
from bert_tf.checkpoints.names import (POOLER, TASK_HEAD_MAPPINGS, hf_name,
                                       hf_names, mappings_for)
from bert_tf.checkpoints.weights import (BertWeights, CheckpointFormatError, check_shapes,
                                         checked, checked_vocab, collect, log_unused,
                                         read_mapped, require_file)
from bert_tf.core.constants import MASKED_LM, NEXT_SENTENCE, PRETRAINING_HEADS
from bert_tf.core.errors import UsageError
from bert_tf.model.config import BertConfig, ConfigError
from bert_tf.model.model_dir import CheckpointMismatchError
from bert_tf.tasks import make_task

_HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def find_huggingface_weights(path: str) -> str:
    """A directory or weights file -> the weights file (safetensors preferred)."""
    if tf.io.gfile.isdir(path):
        for name in _HF_WEIGHT_FILES:
            candidate = os.path.join(path, name)
            if tf.io.gfile.exists(candidate):
                return candidate
        raise FileNotFoundError(f"{path}: no Hugging Face weights (expected one of "
                                f"{', '.join(_HF_WEIGHT_FILES)})")
    require_file(path, "Hugging Face weights file")
    if not path.endswith((".safetensors", ".safetensors.index.json", ".bin")):
        raise CheckpointFormatError(f"{path}: unknown weights format (expected .safetensors, "
                                    f".safetensors.index.json or .bin)")
    return path


def _damaged_weights(path: str, error: Exception) -> Exception:
    first_line = (str(error).splitlines() or [type(error).__name__])[0][:200]
    size = os.path.getsize(path) if os.path.exists(path) else 0
    return model_dir.DamagedCheckpointError(
        f"{path}: cannot be read ({first_line}); the file ({size:,} bytes) is cut short or "
        f"damaged (an interrupted download?): download or copy it again")


def _load_safetensors(path: str) -> Dict[str, np.ndarray]:
    result = {}
    try:
        with safe_open(path, framework="np") as f:
            for key in f.keys():
                result[key] = f.get_tensor(key)
        return result
    except SafetensorError as e:  # a header that does not cover the file: cut short
        raise _damaged_weights(path, e) from None
    except (TypeError, ValueError) as e:  # numpy has no bfloat16
        if "bf16" not in str(e).lower() and "bfloat16" not in str(e).lower():
            raise CheckpointFormatError(f"{path}: cannot read safetensors: {e}") from None
    try:
        import torch  # noqa: F401 (optional (requirements-dev.txt), for .bin files)
    except ImportError:
        raise CheckpointFormatError(f"{path}: holds bfloat16 weights, which need torch to "
                                    f"read; pip install torch") from None
    with safe_open(path, framework="pt") as f:
        return {key: f.get_tensor(key).float().numpy() for key in f.keys()}


_SAFE_TORCH = (2, 6)  # the first torch whose weights_only=True load is safe


def _load_torch_bin(path: str) -> Dict[str, np.ndarray]:
    try:
        import torch  # optional (requirements-dev.txt), for .bin files
    except ImportError:
        raise CheckpointFormatError(f"{path}: reading pytorch_model.bin needs torch (pip "
                                    f"install torch), or convert from model.safetensors") from None
    # weights_only=True unpickles only tensors and plain containers; before torch 2.6 that
    # loader could still run code from a crafted file (CVE-2025-32434).
    version = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2])
    if version < _SAFE_TORCH:
        raise CheckpointFormatError(
            f"{path}: torch {torch.__version__} cannot read pytorch_model.bin safely (its "
            f"weights_only loader runs code from crafted files before torch "
            f"{'.'.join(map(str, _SAFE_TORCH))}); upgrade torch, or convert from "
            f"model.safetensors")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError) as e:  # e.g. a cut-short zip
        raise _damaged_weights(path, e) from None
    except Exception as e:  # noqa: BLE001 - pickle.UnpicklingError and kin
        if type(e).__name__ != "UnpicklingError":
            raise
        raise _damaged_weights(path, e) from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(
            state["state_dict"], dict):
        state = state["state_dict"]  # a training checkpoint around the weights
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointFormatError(
            f"{path}: holds a {type(state).__name__}, not a state dict (tensor names -> "
            f"tensors) as Hugging Face's save_pretrained writes; save the model's "
            f"state_dict(), or convert from model.safetensors")
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def load_huggingface_tensors(weights_file: str) -> Dict[str, np.ndarray]:
    """All tensors of a safetensors / sharded-safetensors index / pytorch_model.bin file."""
    if weights_file.endswith(".index.json"):
        with tf.io.gfile.GFile(weights_file) as f:
            try:
                weight_map = json.load(f).get("weight_map", {})
            except (ValueError, AttributeError) as e:
                raise CheckpointFormatError(f"{weights_file}: not a safetensors index "
                                            f"({e})") from None
        shards = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else [None]
        for shard in shards:  # an untrusted index may not point outside its directory
            if (not isinstance(shard, str) or shard in ("", ".", "..")
                    or os.path.basename(shard) != shard or "\\" in shard):
                raise CheckpointFormatError(
                    f"{weights_file}: weight_map names {shard!r}; shards must be plain file "
                    f"names in the index's own directory")
        result = {}
        for shard in shards:
            shard_path = require_file(os.path.join(os.path.dirname(weights_file), shard),
                                       f"shard listed in {weights_file}")
            result.update(_load_safetensors(shard_path))
        return result
    if weights_file.endswith(".safetensors"):
        return _load_safetensors(weights_file)
    if weights_file.endswith(".bin"):
        return _load_torch_bin(weights_file)
    raise CheckpointFormatError(f"{weights_file}: unknown weights format (expected "
                                f".safetensors, .safetensors.index.json or .bin)")


def _raw_config(config_file: str) -> dict:
    require_file(config_file, "Hugging Face config.json")
    with tf.io.gfile.GFile(config_file) as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{config_file}: cannot parse: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{config_file}: expected a JSON object (a Hugging Face config.json)")
    return raw


def huggingface_config(config_file: str, raw: Optional[dict] = None) -> BertConfig:
    """Reads a Hugging Face config.json, refusing models that are not plain BERT."""
    if raw is None:
        raw = _raw_config(config_file)
    model_type = raw.get("model_type", "bert")
    if model_type != "bert":
        raise ConfigError(f"{config_file}: model_type={model_type!r} is not BERT (its "
                          f"weights do not map onto BERT's)")
    position_type = raw.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConfigError(f"{config_file}: position_embedding_type={position_type!r}; only "
                          f"BERT's absolute position embeddings are supported")
    return BertConfig.from_dict(raw, source=config_file)


def _huggingface_text_settings(directory: str) -> Tuple[Optional[bool], Optional[bool]]:
    """`(do_lower_case, strip_accents)` from tokenizer_config.json, else from tokenizer.json's
    BertNormalizer (`lowercase`, `strip_accents`); each file is read at most once."""
    def read(name):
        path = os.path.join(directory, name)
        if not tf.io.gfile.exists(path):
            return {}
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)

    config = read("tokenizer_config.json")
    lower = bool(config["do_lower_case"]) if "do_lower_case" in config else None
    strip = config.get("strip_accents")
    if lower is None or strip is None:
        normalizer = read("tokenizer.json").get("normalizer") or {}
        if lower is None and "lowercase" in normalizer:
            lower = bool(normalizer["lowercase"])
        if strip is None:
            strip = normalizer.get("strip_accents")
    return lower, None if strip is None else bool(strip)


def vocab_from_tokenizer_json(directory: str) -> Optional[str]:
    """The WordPiece vocab of `directory`/tokenizer.json as a vocab.txt (in a scratch
    directory; None when there is no WordPiece tokenizer.json): transformers 5 saves fast
    tokenizers with tokenizer.json only."""
    path = os.path.join(directory, "tokenizer.json")
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        try:
            model = (json.load(f) or {}).get("model") or {}
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: cannot parse: {e}") from None
    vocab = model.get("vocab")
    if model.get("type") != "WordPiece" or not isinstance(vocab, dict):
        return None
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise CheckpointFormatError(f"{path}: the WordPiece vocab's ids are not 0..{len(tokens) - 1}")
    out = os.path.join(file_io.scratch_dir("bert_tf_vocab_"), model_dir.VOCAB_FILE)
    with open(out, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    logging.info("%s: vocab.txt taken from tokenizer.json's WordPiece vocab", directory)
    return out


def read_huggingface(path: str, config_file: Optional[str] = None,
                     vocab_file: Optional[str] = None,
                     do_lower_case: Optional[bool] = None,
                     task_name: Optional[str] = None) -> BertWeights:
    """Reads Hugging Face BERT weights (BertModel, or BertFor* with the `bert.` prefix).

    `path`: a model directory or the weights file in it. Config, vocab and
    do_lower_case default to `config.json`, `vocab.txt` and `tokenizer_config.json`
    next to the weights. The `cls.predictions.*` and `cls.seq_relationship.*` heads are
    read when present; the MLM decoder matrix must be tied to the word embeddings.
    A fine-tuned model's task head (BertForSequenceClassification, -TokenClassification,
    -QuestionAnswering, -MultipleChoice) is read too, with a task config naming the task
    (`huggingface_task_config`; `task_name` says which when config.json does not).
    """
    weights_file = find_huggingface_weights(path)
    directory = os.path.dirname(weights_file)
    config_file = config_file or os.path.join(directory, "config.json")
    raw_config = _raw_config(config_file)
    config = huggingface_config(config_file, raw_config)
    if vocab_file is None and not tf.io.gfile.exists(os.path.join(directory,
                                                                  model_dir.VOCAB_FILE)):
        vocab_file = vocab_from_tokenizer_json(directory)
    vocab_file = checked_vocab(vocab_file, directory, config, config_file)
    tensors = load_huggingface_tensors(weights_file)
    if "bert.embeddings.word_embeddings.weight" in tensors:
        prefix = "bert."
    elif "embeddings.word_embeddings.weight" in tensors:
        prefix = ""
    else:
        raise CheckpointFormatError(
            f"{weights_file}: not Hugging Face BERT weights (no "
            f"`bert.embeddings.word_embeddings.weight` or `embeddings.word_embeddings.weight`; "
            f"found e.g. {', '.join(sorted(tensors)[:3]) or 'nothing'})")
    arrays, sources, heads, mappings = read_mapped(
        tensors, tensors.__getitem__, config, source=weights_file, hf_prefix=prefix,
        layer_pattern=r"^(?:bert\.)?encoder\.layer\.(\d+)\.")
    used = [n for m in mappings for n in hf_names(m, prefix)]
    task_config = None
    architecture = _task_architecture(raw_config, tensors, task_name, config_file)
    if architecture is not None:
        head_mappings = list(TASK_HEAD_MAPPINGS[architecture])
        head, head_sources = collect(head_mappings, tensors, tensors.__getitem__,
                                     source=weights_file, hf_prefix=prefix)
        missing = [m.hf for m in head_mappings if m.ours not in head]
        if missing:
            raise CheckpointMismatchError(f"{weights_file}: has part of the {architecture} "
                                          f"head but lacks {', '.join(missing)}")
        arrays.update(head)
        sources.update(head_sources)
        used += [m.hf for m in head_mappings]
        task_config = huggingface_task_config(
            raw_config, architecture, head["task_head/dense/kernel"].shape[-1], task_name,
            config, source=config_file)
    decoder = tensors.get("cls.predictions.decoder.weight")
    if decoder is not None:
        used.append("cls.predictions.decoder.weight")
        if not np.array_equal(np.asarray(decoder, np.float32),
                              arrays["encoder/embeddings/word_embeddings"]):
            raise CheckpointMismatchError(
                f"{weights_file}: `cls.predictions.decoder.weight` differs from the word "
                f"embeddings; BERT's masked-LM output matrix is tied to them, so this model "
                f"cannot be represented")
    log_unused(tensors, used, weights_file)
    recorded_lower, strip_accents = _huggingface_text_settings(directory)
    if do_lower_case is None:
        do_lower_case = recorded_lower
    return checked(BertWeights(config, arrays, heads, vocab_file, do_lower_case, sources,
                                strip_accents=strip_accents, task_config=task_config))


# --------------------------------------------------------------------------- task heads in
# The task families a BertFor* class's head serves (the inverse of huggingface_task_class).
_CLASS_TASKS = {"BertForSequenceClassification": "a GLUE task (cola, sst-2 take one text; "
                                                  "mrpc, qqp, mnli, qnli, rte, wnli a pair; "
                                                  "sts-b is the regression)",
                "BertForTokenClassification": "conll2003",
                "BertForQuestionAnswering": "squad (v1.1) or squad_v2",
                "BertForMultipleChoice": "swag"}


def _task_architecture(raw: dict, tensors, task_name: Optional[str],
                       source: str) -> Optional[str]:
    """The BertFor* class whose head the weights hold (None: no task head)."""
    named = [a for a in raw.get("architectures") or [] if a in TASK_HEAD_MAPPINGS]
    has_head = {a for a, ms in TASK_HEAD_MAPPINGS.items() if ms[0].hf in tensors}
    if not has_head:
        if task_name:
            raise CheckpointFormatError(
                f"{source}: --task_name={task_name} but the weights hold no task head (no "
                f"`classifier.*` or `qa_outputs.*`); convert without --task_name and "
                f"fine-tune with bert_tf.finetune")
        return None
    if named and named[0] in has_head:
        return named[0]
    if task_name:
        return huggingface_task_class({"task_name": split_task_name(task_name)[0]})
    raise CheckpointFormatError(
        f"{source}: the weights hold a `classifier` head but config.json names no BertFor* "
        f"architecture; pass --task_name (a GLUE task, conll2003 or swag) to say which")


# --task_name spellings that name a task and its options (a QA model trained on SQuAD 2.0
# answers "no answer" when the [CLS] score wins: our SQuAD task's v2.0 mode).
_TASK_VARIANTS = {"squad_v2": ("squad", {"version_2_with_negative": True}),
                  "squad2": ("squad", {"version_2_with_negative": True})}


def split_task_name(name: str):
    """`--task_name` -> (our task name, its options); `squad_v2` is SQuAD in v2.0 mode.

    >>> split_task_name("squad_v2"), split_task_name("sst2")
    (('squad', {'version_2_with_negative': True}), ('sst2', {}))
    """
    name, options = _TASK_VARIANTS.get(name.strip().lower().replace("-", "_"), (name, {}))
    return name, dict(options)


def huggingface_task_config(raw: dict, architecture: str, num_outputs: int,
                            task_name: Optional[str], config: BertConfig, *,
                            source: str) -> dict:
    """task_config.json for a fine-tuned HF model: the task (`task_name`, else what
    config.json says: the architecture, `finetuning_task`, a regression's one output),
    its labels from `id2label` and the task's default max_seq_length.

    >>> from bert_tf.model.config import BertConfig
    >>> raw = {"id2label": {"0": "NEGATIVE", "1": "POSITIVE"}, "finetuning_task": "sst2"}
    >>> c = huggingface_task_config(raw, "BertForSequenceClassification", 2, None,
    ...                             BertConfig(), source="config.json")
    >>> c["task_name"], c["label_list"], c["max_seq_length"]
    ('SST-2', ['NEGATIVE', 'POSITIVE'], 128)
    """
    family = _CLASS_TASKS[architecture]
    name, options = split_task_name(task_name) if task_name else (None, {})
    if name is None:
        fixed = {"BertForTokenClassification": "conll2003",
                 "BertForQuestionAnswering": "squad", "BertForMultipleChoice": "swag"}
        name = fixed.get(architecture)
    if name is None:  # sequence classification: which GLUE task?
        given = raw.get("finetuning_task")
        try:
            name = tasks.canonical_task_name(given) if given else None
        except UsageError:
            name = None
        if name is None and (raw.get("problem_type") == "regression" or num_outputs == 1):
            name = "sts-b"
        if name is None:
            raise UsageError(
                f"{source}: a BertForSequenceClassification with {num_outputs} labels and no "
                f"finetuning_task; pass --task_name to say which task's inputs it takes: "
                f"{family}")
    if huggingface_task_class({"task_name": name}) != architecture:
        raise UsageError(f"--task_name={name}: does not fit {source}'s {architecture} head "
                         f"(that head serves {family})")
    if raw.get("problem_type") == "multi_label_classification":
        raise CheckpointFormatError(f"{source}: problem_type=multi_label_classification (a "
                                    f"sigmoid per label) has no bert_tf task; only "
                                    f"single-label classification and regression import")
    default = tasks.make_task(name)
    if architecture in ("BertForSequenceClassification", "BertForTokenClassification"):
        regression = default.label_list is None
        if regression != (num_outputs == 1) or (
                regression and raw.get("problem_type") not in (None, "regression")):
            raise UsageError(
                f"--task_name={name}: {'a regression' if regression else 'a classification'} "
                f"task, but {source} has {num_outputs} output(s) (problem_type="
                f"{raw.get('problem_type')}); name a task of the same kind")
        if not regression:
            labels = _labels(raw, num_outputs, source)
            if labels != default.label_list:
                options["label_list"] = labels
    length = min(default.default_max_seq_length, config.max_position_embeddings)
    return tasks.make_task(name, max_seq_length=length, **options).task_config()


def _labels(raw: dict, count: int, source: str) -> list:
    """id2label as a list (index = label id); transformers' LABEL_i when absent."""
    id2label = raw.get("id2label") or {str(i): f"LABEL_{i}" for i in range(count)}
    try:
        by_id = {int(k): str(v) for k, v in id2label.items()}
    except (AttributeError, ValueError):
        raise ConfigError(f"{source}: id2label must map label ids to names") from None
    if sorted(by_id) != list(range(count)):
        raise CheckpointMismatchError(f"{source}: id2label has ids {sorted(by_id)} but the "
                                      f"head has {count} outputs; fix id2label")
    return [by_id[i] for i in range(count)]



# --------------------------------------------------------------------------- export
HF_WEIGHTS_FILE = "model.safetensors"
HF_CONFIG_FILE = "config.json"
# Our activation name -> transformers' ACT2FN name for the same function.
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "gelu_new": "gelu_new",
                   "gelu_pytorch_tanh": "gelu_pytorch_tanh", "relu": "relu", "tanh": "tanh",
                   "swish": "swish", "silu": "silu"}
_SPECIAL_TOKENS = {"unk_token": constants.UNK_TOKEN, "sep_token": constants.SEP_TOKEN,
                   "pad_token": constants.PAD_TOKEN, "cls_token": constants.CLS_TOKEN,
                   "mask_token": constants.MASK_TOKEN}


def huggingface_architecture(weights: BertWeights) -> str:
    """The transformers class the weights load into: the task's class for a fine-tuned
    model, BertForPreTraining with both pretraining heads, else BertModel.

    >>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16)
    >>> huggingface_architecture(BertWeights(cfg, {}, PRETRAINING_HEADS))
    'BertForPreTraining'
    """
    if weights.task_config is not None:
        return huggingface_task_class(weights.task_config)
    heads = set(weights.heads)
    if heads == set(PRETRAINING_HEADS):
        return "BertForPreTraining"
    if heads == {MASKED_LM}:
        return "BertForMaskedLM"
    if heads == {NEXT_SENTENCE}:
        return "BertForNextSentencePrediction"
    return "BertModel"


def huggingface_task_class(task_config: dict) -> str:
    """The transformers class with the same head as the task in task_config.json.

    >>> huggingface_task_class({"task_name": "SST-2"}), huggingface_task_class({"task_name": "squad"})
    ('BertForSequenceClassification', 'BertForQuestionAnswering')
    """
    name = make_task(task_config["task_name"]).huggingface_class  # declared by each task
    if name is not None:
        return name
    raise CheckpointFormatError(f"task {task_config['task_name']!r} has no Hugging Face "
                                f"class with the same head; export the encoder alone")


def huggingface_config_dict(weights: BertWeights, architecture: Optional[str] = None) -> dict:
    """config.json for transformers: our fields, `hidden_act` in its names
    (`gelu_approximate` -> `gelu_new`), the architecture and, for a task, its labels.

    >>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16, hidden_act="gelu_approximate")
    >>> d = huggingface_config_dict(BertWeights(cfg, {}))
    >>> d["hidden_act"], d["architectures"], d["model_type"]
    ('gelu_new', ['BertModel'], 'bert')
    """
    config = weights.config
    architecture = architecture or huggingface_architecture(weights)
    values = config.to_dict()
    values["hidden_act"] = _HF_ACTIVATIONS[config.hidden_act]
    values.update(architectures=[architecture], model_type="bert",
                  position_embedding_type="absolute", pad_token_id=_pad_id(weights.vocab_file),
                  dtype="float32")
    task = weights.task_config
    if task is not None:  # transformers' field for it; the import reads it back
        values["finetuning_task"] = task["task_name"]
    if task is not None and architecture != "BertForQuestionAnswering":
        labels = task.get("label_list")
        if architecture == "BertForMultipleChoice" or not labels:
            labels = ["LABEL_0"]  # one score per example (choice / regression)
        values["id2label"] = {str(i): str(label) for i, label in enumerate(labels)}
        values["label2id"] = {str(label): i for i, label in enumerate(labels)}
        if architecture == "BertForSequenceClassification":
            values["problem_type"] = ("regression" if not task.get("label_list")
                                      else "single_label_classification")
    return values


def _pad_id(vocab_file: Optional[str]) -> int:
    """The id of [PAD] in the vocab (0 in BERT's), which HF's embeddings treat as padding."""
    tokens = text_rules.load_vocab(vocab_file) if vocab_file else []
    return tokens.index(constants.PAD_TOKEN) if constants.PAD_TOKEN in tokens else 0


def write_huggingface(weights: BertWeights, output_dir: str) -> str:
    """Writes a Hugging Face model dir that transformers' `from_pretrained` loads.

    config.json, model.safetensors (names of `huggingface_architecture(weights)`: encoder
    under `bert.` when there are heads; the MLM decoder is tied to the word embeddings,
    so it is left out as `save_pretrained` leaves it out), vocab.txt and
    tokenizer_config.json (BertTokenizer, do_lower_case when known). Returns the
    weights file's path.
    """
    check_shapes(weights)
    architecture = huggingface_architecture(weights)
    prefix = "" if architecture == "BertModel" else "bert."
    mappings = mappings_for(weights.config.num_hidden_layers, weights.heads)
    if weights.task_config is not None:
        mappings += list(TASK_HEAD_MAPPINGS[architecture])
    tensors = {}
    for m in mappings:
        if m.ours not in weights.arrays and m.ours in POOLER:
            logging.warning("no pooler to export: `%s` is left out (transformers initializes "
                            "it randomly)", hf_name(m, prefix))
            continue
        if m.ours not in weights.arrays:
            raise CheckpointMismatchError(f"no value for `{m.ours}` to export as "
                                          f"`{hf_name(m, prefix)}`")
        value = np.asarray(weights.arrays[m.ours], np.float32)
        tensors[hf_name(m, prefix)] = np.ascontiguousarray(value.T if m.hf_transpose else value)
    tf.io.gfile.makedirs(output_dir)
    path = os.path.join(output_dir, HF_WEIGHTS_FILE)
    save_file(tensors, path, metadata={"format": "pt"})  # transformers refuses other formats
    with tf.io.gfile.GFile(os.path.join(output_dir, HF_CONFIG_FILE), "w") as f:
        f.write(json.dumps(huggingface_config_dict(weights, architecture), indent=2,
                           sort_keys=True) + "\n")
    tokenizer = {"tokenizer_class": "BertTokenizer",
                 "model_max_length": weights.config.max_position_embeddings,
                 "tokenize_chinese_chars": True, "strip_accents": weights.strip_accents,
                 **_SPECIAL_TOKENS}  # strip_accents None: follows do_lower_case, as ours
    if weights.do_lower_case is None:
        logging.warning("the source does not say whether its vocab is cased: "
                        "tokenizer_config.json leaves do_lower_case out, and transformers' "
                        "BertTokenizer then lower-cases")
    else:
        tokenizer["do_lower_case"] = bool(weights.do_lower_case)
    with tf.io.gfile.GFile(os.path.join(output_dir, model_dir.TOKENIZER_CONFIG_FILE),
                           "w") as f:
        f.write(json.dumps(tokenizer, indent=2, sort_keys=True) + "\n")
    with tf.io.gfile.GFile(os.path.join(output_dir, "special_tokens_map.json"), "w") as f:
        f.write(json.dumps(_SPECIAL_TOKENS, indent=2, sort_keys=True) + "\n")
    if weights.vocab_file:
        tf.io.gfile.copy(weights.vocab_file, os.path.join(output_dir, model_dir.VOCAB_FILE),
                         overwrite=True)
    else:
        logging.warning("no vocab to export: the output has no vocab.txt, so transformers "
                        "cannot build its tokenizer")
    return path
