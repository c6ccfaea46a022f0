r"""Extend a checkpoint's vocabulary for a new language or domain, then keep pretraining.

    python -m bert_tf.extend_vocab --init_checkpoint=converted/minilm \
        --input_file='korean/*.txt' --output_dir=runs/minilm_ko --num_new_tokens=4000 \
        --nostrip_accents
    python -m bert_tf.pretrain --init_checkpoint=runs/minilm_ko ...   # continues from it

1. Learns the pieces the new corpus needs with build_vocab's learner
   (`data_prep.build_vocab`: every character of the corpus, then merged pieces, in the
   order learned) under the new text settings (`--do_lower_case` / `--strip_accents` /
   `--pre_tokenizer`, default: the checkpoint's), and keeps the first
   `--num_new_tokens` that the checkpoint's vocab lacks.
2. Fills the `[unusedN]` slots first (ids do not move), then appends.
3. Resizes the word embeddings and the masked-LM output bias (and `vocab_size` in the
   config); every other weight is copied. A new row starts as the mean of the old rows
   of the pieces that spell it: the new piece tokenized with the OLD vocab and the OLD
   text settings (so a Hangul syllable added to an uncased English vocab starts as the
   mean of its jamo, which that vocab has); a piece the old vocab cannot spell at all
   starts as the mean of all old rows. The bias likewise.
4. Writes a model directory (config, vocab, tokenizer_config.json, checkpoint with
   `encoder`, `masked_lm`, `next_sentence`) that `pretrain --init_checkpoint=DIR` and
   every other command accept.

It lives in bert_tf (not data_prep, which stays TensorFlow-free) because it rewrites a
checkpoint; the learning half is data_prep.build_vocab's.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import flags, logging

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
from bert_tf.app import setting_fields, settings
from bert_tf.app.setting_fields import setting
from bert_tf.core import output_guard
from bert_tf.core.constants import PRETRAINING_HEADS
from bert_tf.core.errors import BertTfError
from bert_tf.text.text_rules import WordPieceTokenizer, load_vocab
from data_prep import build_vocab as bv, corpus
from data_prep.build_vocab import build_vocab_from_counts

FLAGS = flags.FLAGS


class ExtendVocabError(BertTfError, ValueError):
    """Bad input the user fixes (message names the file or flag)."""


@dataclasses.dataclass
class Extension:
    """The new vocab and where each new token went."""
    vocab: List[str]
    new_tokens: List[str]
    ids: List[int]              # id of each new token in `vocab`
    filled_unused: int          # how many [unusedN] slots were used


def is_unused_slot(token: str) -> bool:
    return token.startswith("[unused") and token.endswith("]")


def learn_new_tokens(word_counts: Dict[str, int], old_vocab: Sequence[str], num_new: int, *,
                     isolated_chars: Sequence[str] = (), min_frequency: int = 2) -> List[str]:
    """The first `num_new` pieces build_vocab learns from `word_counts` that are not in
    `old_vocab`, in the order learned (characters first, then merges).

    >>> learn_new_tokens({"한국": 5, "한국어": 3}, ["[PAD]", "[UNK]", "한"], 4, min_frequency=1)
    ['국', '어', '##국', '##어']
    """
    have = set(old_vocab)
    size = 5 + 2 * num_new
    while True:
        learned = build_vocab_from_counts(word_counts, size, num_unused=0,
                                          isolated_chars=isolated_chars,
                                          min_frequency=min_frequency)
        new = [t for t in learned[5:] if t not in have]
        if len(new) >= num_new or len(learned) < size:
            return new[:num_new]
        size *= 2


def place_tokens(old_vocab: Sequence[str], new_tokens: Sequence[str]) -> Extension:
    """[unusedN] slots first (in id order), then appended.

    >>> place_tokens(["[PAD]", "[unused0]", "[UNK]", "a"], ["x", "y"]).vocab
    ['[PAD]', 'x', '[UNK]', 'a', 'y']
    """
    vocab = list(old_vocab)
    slots = [i for i, t in enumerate(vocab) if is_unused_slot(t)]
    ids = []
    for k, token in enumerate(new_tokens):
        if k < len(slots):
            vocab[slots[k]] = token
            ids.append(slots[k])
        else:
            ids.append(len(vocab))
            vocab.append(token)
    return Extension(vocab, list(new_tokens), ids, min(len(slots), len(new_tokens)))


def spelling_ids(piece: str, old_tokenizer) -> List[int]:
    """Old-vocab ids of `piece` (a "##" piece is spelled as a word continuation) under the
    old text settings; [] when the old vocab cannot spell it.

    `old_tokenizer` is a `text_rules.WordPieceTokenizer` over the old vocab.
    """
    continuation = piece.startswith("##")
    text = piece[2:] if continuation else piece
    ids: List[int] = []
    for word in old_tokenizer._basic.split_token(text):
        pieces = old_tokenizer._wordpiece_uncached(word, continuation)
        if pieces == (old_tokenizer.unk_id,):
            return []
        ids.extend(pieces)
        continuation = False  # a later word of the piece starts fresh
    return ids


def initial_rows(old: np.ndarray, spellings: Sequence[List[int]]) -> Tuple[np.ndarray, int]:
    """Mean of the old rows of each spelling (mean of all rows for an empty one)."""
    fallback = old.mean(axis=0)
    rows = np.stack([old[s].mean(axis=0) if s else fallback for s in spellings]) \
        if spellings else np.zeros((0,) + old.shape[1:], old.dtype)
    return rows.astype(old.dtype), sum(1 for s in spellings if not s)


def extend_model_dir(init_checkpoint: str, input_file: str, output_dir: str, *,
                     num_new_tokens: int, do_lower_case: Optional[bool] = None,
                     strip_accents: Optional[bool] = None, pre_tokenizer: Optional[str] = None,
                     min_frequency: int = 2, max_input_lines: int = 0,
                     overwrite: bool = False) -> dict:
    """Does the whole job (module docstring); returns a summary dict.

    The new model dir is built beside `output_dir` and swapped in when complete
    (`output_guard.new_output_dir`): an `output_dir` that is, holds or lies inside
    `init_checkpoint` or the corpus is refused, even with `overwrite`."""
    if num_new_tokens < 1:
        raise ExtendVocabError(f"--num_new_tokens={num_new_tokens}: must be >= 1")
    paths = corpus.expand_input_globs(input_file)
    inputs = [init_checkpoint, *paths]
    with output_guard.new_output_dir(output_dir, "extend_vocab", overwrite=overwrite,
                                     inputs=inputs) as tmp:
        return _extend_into(init_checkpoint, paths, tmp, num_new_tokens=num_new_tokens,
                            do_lower_case=do_lower_case, strip_accents=strip_accents,
                            pre_tokenizer=pre_tokenizer, min_frequency=min_frequency,
                            max_input_lines=max_input_lines)


def _extend_into(init_checkpoint: str, paths: Sequence[str], output_dir: str, *,
                 num_new_tokens: int, do_lower_case: Optional[bool],
                 strip_accents: Optional[bool], pre_tokenizer: Optional[str],
                 min_frequency: int, max_input_lines: int) -> dict:
    from bert_tf.model import model_dir  # TensorFlow: not loaded by --help (0.5 s, not 9 s)
    from bert_tf.model.pretrainer import BertPretrainer  # TensorFlow: not for --help

    # The model as it is, and the text settings the new corpus is read with (the flags,
    # else the model's).
    old = model_dir.resolve(init_checkpoint).require(config=True, vocab=True)
    new_text = model_dir.resolve(init_checkpoint, do_lower_case=do_lower_case,
                          strip_accents=strip_accents, pre_tokenizer=pre_tokenizer).text
    config, vocab_file, old_text = old.config, old.vocab_file, old.text
    old_vocab = load_vocab(vocab_file)

    # 1. Learn (build_vocab's reader, pretokenizer and learner).
    stats = bv.CorpusStats()
    pretokenize = bv.bert_pretokenizer(new_text.do_lower_case, new_text.strip_accents,
                                       new_text.pre_tokenizer)
    counts = bv.count_words(bv.read_corpus_lines(paths, stats, max_input_lines=max_input_lines),
                            pretokenize, stats)
    if not counts:
        raise ExtendVocabError(f"no sentences found in {', '.join(paths)}")
    isolated = bv.isolated_characters({c for w in counts for c in w},
                                      bv.bert_pretokenizer(new_text.do_lower_case,
                                                           new_text.strip_accents))
    new_tokens = learn_new_tokens(counts, old_vocab, num_new_tokens,
                                  isolated_chars=isolated, min_frequency=min_frequency)
    ext = place_tokens(old_vocab, new_tokens)

    # 2. Weights: restore the old model, build the new one, copy and resize.
    old_model = BertPretrainer(config, name="pretrainer")
    restored_heads = _restore(old, old_model)
    new_config = dataclasses.replace(config, vocab_size=max(config.vocab_size, len(ext.vocab)))
    new_model = BertPretrainer(new_config, name="pretrainer")
    old_tok = WordPieceTokenizer(old_vocab, **old_text.tokenizer_kwargs())
    spellings = [spelling_ids(t, old_tok) for t in ext.new_tokens]
    resized = {id(old_model.encoder.word_embeddings): "embeddings",
               id(old_model.masked_lm.output_bias): "bias"}
    unspelled = 0
    for old_var, new_var in zip(old_model.weights, new_model.weights):
        value = old_var.numpy()
        kind = resized.get(id(old_var))
        if kind is not None:
            grown = np.zeros(new_var.shape, value.dtype)
            grown[:value.shape[0]] = value
            rows, unspelled = initial_rows(value[:len(old_vocab)], spellings)
            grown[ext.ids] = rows
            value = grown
        elif tuple(old_var.shape) != tuple(new_var.shape):
            raise RuntimeError(f"extend_vocab: {old_var.path} changed shape")  # cannot happen
        new_var.assign(value)

    # 3. Write the model directory.
    new_vocab_file = os.path.join(output_dir, model_dir.VOCAB_FILE)
    bv.write_vocab(ext.vocab, new_vocab_file)
    model_dir.write_model_dir(output_dir, new_config, new_model.checkpoint_items(),
                              vocab_file=new_vocab_file, do_lower_case=new_text.do_lower_case,
                              strip_accents=new_text.strip_accents,
                              pre_tokenizer=new_text.pre_tokenizer)
    return {"old_vocab_size": len(old_vocab), "new_vocab_size": len(ext.vocab),
            "new_tokens": len(ext.new_tokens), "filled_unused_slots": ext.filled_unused,
            "appended": len(ext.new_tokens) - ext.filled_unused,
            "unspelled_by_old_vocab": unspelled, "restored_heads": restored_heads,
            "sentences": stats.lines, "distinct_words": len(counts),
            "text_settings": new_text.to_json()}


def _restore(resolved, model) -> List[str]:
    """Restores the encoder (required) and whichever pretraining heads the checkpoint has."""
    from bert_tf.model import model_dir  # TensorFlow: not loaded by --help (0.5 s, not 9 s)

    start = model_dir.restore_start_point(resolved, model.checkpoint_items(),
                                          optional=PRETRAINING_HEADS)
    return [h for h in start.children if h in PRETRAINING_HEADS]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExtendVocabConfig(setting_fields.PreTokenizerSetting, setting_fields.TextSettings):
    """One extension (what the flags say): `extend_model_dir`'s arguments."""
    init_checkpoint: Optional[str] = setting_fields.override(
        settings.ModelDirSettings, "init_checkpoint",
        help="Model dir to extend (convert_checkpoint, pretrain or finetune output).")
    input_file: Optional[str] = setting(None, "The new corpus: comma-separated globs, the "
                                        "pretraining format (one sentence a line).")
    output_dir: Optional[str] = setting(None, "Where the extended model dir goes.")
    num_new_tokens: int = setting(5000, "Pieces to add: the [unusedN] slots are filled "
                                  "first, then the vocab grows.", lower=1)
    do_lower_case: Optional[bool] = setting_fields.override(
        setting_fields.TextSettings, "do_lower_case",
        help="Text settings for the new corpus (default: the checkpoint's).")
    min_frequency: int = setting(2, "A merged piece must occur this often.", lower=1)
    max_input_lines: int = setting(0, "Read at most this many lines (0: all).", lower=0)
    overwrite: bool = setting(False, "Replace an earlier bert_tf output at --output_dir once "
                              "the new one is complete (never the --init_checkpoint itself).")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    ExtendVocabConfig.define_flags(flag_values)
    flags.mark_flags_as_required(["init_checkpoint", "input_file", "output_dir"],
                                 flag_values=flag_values)


def main(argv):
    del argv  # cli.run_main refuses positional arguments

    config = ExtendVocabConfig.from_flags(FLAGS)
    # Errors derived from BertTfError (and missing files): one line from cli.run_main.
    summary = extend_model_dir(
        config.init_checkpoint, config.input_file, config.output_dir,
        num_new_tokens=config.num_new_tokens, do_lower_case=config.do_lower_case,
        strip_accents=config.strip_accents, pre_tokenizer=config.pre_tokenizer,
        min_frequency=config.min_frequency, max_input_lines=config.max_input_lines,
        overwrite=config.overwrite)
    logging.info("extended %s -> %s: %s", config.init_checkpoint, config.output_dir, summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    cli.run_main(main, define_flags)
