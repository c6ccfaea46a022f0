"""Task text split as the model's pretraining text was (`--pre_tokenizer`, Korean morphemes).

A model dir whose tokenizer_config.json records `"pre_tokenizer": "kiwi"` was pretrained
on text with spaces inserted at morpheme boundaries (`bert_tf.pre_tokenizers`). Every
command that tokenizes a user's text on the host -- finetune (train, eval, predict),
create_finetuning_data and extract_features -- takes its tokenizer from `host_tokenizer`,
which wraps the in-graph `BertTokenizer` in a `PreSplitTokenizer` for such a model: the
tasks and their featurizers stay as they are and see the same ids the pretraining did.

Each text the task tokenizes is split on its own: a sentence (classification, KLUE-NER's
characters), but a word of the word-level taggers (CoNLL columns, JSON tokens, SQuAD's
doc words), which kiwi then analyses without its sentence (4.5% of NSMC's dev words
split otherwise than inside their review).

Offsets stay the user's: a pre-tokenizer only inserts spaces (after NFC normalization,
which the tokenizer does itself when it keeps accents), so `tokenize_with_offsets`
returns byte offsets into the texts as given, and a token-classification prediction's
character offsets index the original sentence.

An exported SavedModel cannot run the analyser in its graph: its raw-text signatures
take text already split (export_model says so; docs/serving.md).

>>> insert_spaces("대한민국은 좋다", [4])
('대한민국 은 좋다', [0, 1, 2, 3, 4, 4, 5, 6, 7, 8])
>>> space_positions("대한민국은 좋다", "대한민국 은 좋다")
[4]
"""

from __future__ import annotations

import unicodedata
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from bert_tf.text import pre_tokenizers
from bert_tf.core.errors import BertTfError


class PreSplitError(BertTfError, ValueError):
    """A pre-tokenizer's output that is not its input with spaces inserted."""


def space_positions(text: str, split: str) -> List[int]:
    """Where `split` (a pre-tokenizer's output for `text`) inserted a space, as positions in
    `text` (a space goes before the character at that position). The splitter sees `text`
    NFC-normalized; a boundary inside a character that normalization composed is dropped
    (the tokenizer normalizes the same way, so the pieces are the same)."""
    normal = unicodedata.normalize("NFC", text)
    cuts, j = [], 0
    for char in split:
        if j < len(normal) and char == normal[j]:
            j += 1
        elif char == " ":
            cuts.append(j)
        else:
            break
    if j != len(normal):
        raise PreSplitError(f"the pre-tokenizer changed {text[:40]!r} beyond inserting "
                            f"spaces ({split[:40]!r}); report it with the text")
    if normal == text:
        return cuts
    # Positions of the normalized text that are clean cuts of the original one.
    at = {}
    for k in range(len(text) + 1):
        head = unicodedata.normalize("NFC", text[:k])
        if head + unicodedata.normalize("NFC", text[k:]) == normal:
            at.setdefault(len(head), k)
    return [at[c] for c in cuts if c in at]


def insert_spaces(text: str, positions: Sequence[int]) -> Tuple[str, List[int]]:
    """`text` with a space before each of `positions`, and for each character of the
    result the index of the original character it is (an inserted space: the one after
    it), plus len(text) at the end."""
    out, origin, last = [], [], 0
    for p in sorted(set(positions)):
        out.append(text[last:p])
        origin += range(last, p)
        out.append(" ")
        origin.append(p)
        last = p
    out.append(text[last:])
    origin += range(last, len(text) + 1)
    return "".join(out), origin


def _utf8_starts(text: str) -> List[int]:
    """Byte offset of each character of `text` in UTF-8 (a lone surrogate: 3 bytes, as the
    tokenizer encodes it), and of its end."""
    starts, n = [], 0
    for char in text:
        starts.append(n)
        n += len(char.encode("utf-8", "surrogatepass"))
    return starts + [n]


def _as_strings(texts) -> List[str]:
    """The tokenizer's `texts` (str, bytes, a list of them, numpy or an eager tensor) as a
    list of str."""
    if isinstance(texts, tf.Tensor):
        texts = texts.numpy()
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    elif isinstance(texts, np.ndarray):
        texts = texts.reshape(-1).tolist()
    return [t.decode("utf-8", "surrogatepass") if isinstance(t, bytes) else str(t)
            for t in texts]


class PreSplitTokenizer:
    """A `BertTokenizer` (`tokenizer`) that first splits each text with the pre-tokenizer
    `pre_tokenizer` names (host side, Python), as the model's pretraining text was.

    The tokenizing methods (`tokenize`, `tokenize_words`, `basic_tokenize`, `encode`,
    `tokenize_with_offsets`) split first; everything else (ids, vocab, `decode`, ...) is
    the wrapped tokenizer's. `tokenize_with_offsets` maps the offsets back to the texts as
    given. `splitter` (lines -> split lines) replaces the named one (tests).
    """

    def __init__(self, tokenizer, pre_tokenizer: str,
                 splitter: Optional[Callable[[Sequence[str]], List[str]]] = None):
        self.tokenizer = tokenizer
        self.pre_tokenizer = pre_tokenizer
        self._splitter = splitter or pre_tokenizers.get_pre_tokenizer(pre_tokenizer)

    def __getattr__(self, name):
        if name == "tokenizer":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def split(self, texts) -> List[str]:
        """The texts as the pretraining split them (each distinct text split once)."""
        texts = _as_strings(texts)
        distinct = list(dict.fromkeys(texts))
        done: Dict[str, str] = dict(zip(distinct, self._splitter(distinct))) if distinct else {}
        return [done[t] for t in texts]

    def tokenize(self, texts):
        return self.tokenizer.tokenize(self.split(texts))

    def tokenize_words(self, texts):
        return self.tokenizer.tokenize_words(self.split(texts))

    def basic_tokenize(self, texts):
        return self.tokenizer.basic_tokenize(self.split(texts))

    def encode(self, texts_a, texts_b=None, max_seq_length: int = 128):
        return self.tokenizer.encode(self.split(texts_a),
                                     None if texts_b is None else self.split(texts_b),
                                     max_seq_length=max_seq_length)

    def tokenize_with_offsets(self, texts):
        """As `BertTokenizer.tokenize_with_offsets`, with byte offsets into `texts` as
        given (the split's inserted spaces are in no piece)."""
        texts = _as_strings(texts)
        split = [insert_spaces(t, space_positions(t, s))
                 for t, s in zip(texts, self.split(texts))]
        ids, starts, ends = self.tokenizer.tokenize_with_offsets([s for s, _ in split])
        new_starts, new_ends = [], []
        for (text, (spaced, origin)), row_starts, row_ends in zip(
                zip(texts, split), starts.to_list(), ends.to_list()):
            char_of_byte = {b: c for c, b in enumerate(_utf8_starts(spaced))}
            original_byte = _utf8_starts(text)
            new_starts += [original_byte[origin[char_of_byte[b]]] for b in row_starts]
            # An end is exclusive: the character before it is a real one, never a space
            # the split inserted (no piece holds a space).
            new_ends += [original_byte[origin[char_of_byte[b] - 1] + 1] for b in row_ends]

        def like(values, template):
            return template.with_flat_values(tf.constant(values, tf.int64, [len(values)]))

        return ids, like(new_starts, starts), like(new_ends, ends)


def host_tokenizer(resolved):
    """THE tokenizer of the commands that tokenize a user's text on the host: the resolved
    model dir's `BertTokenizer`, wrapped in a `PreSplitTokenizer` when the model's text was
    pre-split (`resolved.text.pre_tokenizer`). An export uses the in-graph one alone."""
    tokenizer = resolved.tokenizer()
    if resolved.text.pre_tokenizer:
        return PreSplitTokenizer(tokenizer, resolved.text.pre_tokenizer)
    return tokenizer
