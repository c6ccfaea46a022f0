"""CoNLL-2003 named-entity recognition: BIO tags from the first sub-token of each word.

Data: the CoNLL-2003 files (`eng.train`, `eng.testa`, `eng.testb`; or `train.txt`,
`valid.txt`, `test.txt`), one `word POS chunk NER` line per token, a blank line between
sentences, `-DOCSTART-` lines between documents. The files use IOB1 tags (B- only
between two adjacent entities of one type); the reader converts them to IOB2 (BIO), so
every entity starts with B-. Entity-level precision / recall / F1 are conlleval's: an
entity counts only with exact span and type (`metrics.entity_scores`).

Features: each word is WordPiece-tokenized on its own; the label sits on the word's
first sub-token, every other position gets -1 and is ignored by the loss. A sentence
longer than `max_seq_length - 2` pieces is SPLIT at word boundaries into consecutive
features (no word is dropped, so every word gets a prediction and evaluation sees the
whole sentence); a single word with more pieces than that keeps only its first ones.

>>> iob1_to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC"])
['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC']
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.serving import modules as serving
from bert_tf.tasks import metrics as metrics_lib
from bert_tf.tasks.base import (Task, TaskDataError, make_head, read_task_text,
                                require_examples, sparse_ce, write_tsv_lines)

CONLL2003_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC",
                    "B-MISC", "I-MISC"]
IGNORE = -1  # label id of positions the loss and the predictions skip


@dataclasses.dataclass(frozen=True)
class NerExample:
    guid: str
    words: List[str]
    tags: List[str]  # IOB2
    source: str = ""  # "file:line" of the first word
    # WordPiece ids of each word when fixed by the caller (a character-level sentence's
    # units are its pieces: `token_classification`), else None: each word is tokenized
    pieces: Optional[List[List[int]]] = None


def iob1_to_iob2(tags: Sequence[str]) -> List[str]:
    """IOB1 -> IOB2: an I-X that does not continue an X entity becomes B-X."""
    out, previous = [], "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        previous = tag
    return out


def read_conll(path: str, labels: Optional[Sequence[str]] = None, *,
               text: Optional[str] = None, tags_optional: bool = False,
               hint: str = "is this a CoNLL-2003 file?",
               missing_hint: str = "check the file's path") -> List[NerExample]:
    """Sentences of a CoNLL-style file (CoNLL-2003's and the user's own): `word ... tag`
    a line (the first column is the word, the last the tag), a blank line between
    sentences, `-DOCSTART-` lines skipped; IOB1 tags become BIO (IOB2).

    `labels`: every tag's B- form must be one of them (None: any tag; a task that
    collects its tags checks them itself). `tags_optional`: a word alone on its line is
    allowed (a test file), and a sentence holding one has `tags` None. `hint`: what to do
    about a line without a tag. `text`: the file's text when the caller read it already
    (else it is read here; `missing_hint` says what a missing file's directory must hold).
    A bad line is a TaskDataError naming file:line.
    """
    if text is None:
        text = read_task_text(path, missing_hint, encoding="utf-8")
    name = os.path.basename(path)
    examples, words, tags, first_line = [], [], [], 0

    def flush():
        nonlocal words, tags
        if words:
            tagged = all(t is not None for t in tags)
            examples.append(NerExample(guid=f"{name}-{len(examples)}", words=words,
                                       tags=iob1_to_iob2(tags) if tagged else None,
                                       source=f"{path}:{first_line}"))
        words, tags = [], []

    for line_no, line in enumerate(text.split("\n"), start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            flush()
            continue
        if len(fields) < 2 and not tags_optional:
            raise TaskDataError(f"{path}:{line_no}: expected `word ... tag` columns (the tag "
                                f"last), got {line.strip()!r}; {hint}")
        tag = fields[-1] if len(fields) > 1 else None
        if (labels is not None and tag is not None and tag != "O"
                and (tag[:2] not in ("B-", "I-") or "B-" + tag[2:] not in labels)):
            kinds = ", ".join(sorted({t[2:] for t in labels if t != "O"}))
            what = ("a CoNLL-2003 NER tag" if list(labels) == CONLL2003_LABELS
                    else "one of the model's tags")
            raise TaskDataError(f"{path}:{line_no}: tag {tag!r} is not {what} (expected O "
                                f"or B-/I- with {kinds})")
        if not words:
            first_line = line_no
        words.append(fields[0])
        tags.append(tag)
    flush()
    return examples


class Conll2003NerTask(Task):
    """Token classification over the CoNLL-2003 BIO tags (`--task_name=conll2003`)."""

    name = "conll2003"
    primary_metric = "f1"
    label_names = ("label_ids",)
    submission_name = "conll2003_predictions.txt"
    huggingface_class = "BertForTokenClassification"
    # `label_list` replaces the CoNLL-2003 tags (a tagger imported with its own tag set,
    # e.g. a Hugging Face model's id2label); task_config.json records it.
    option_names = ("label_list",)

    def __init__(self, tokenizer=None, max_seq_length: Optional[int] = None, data_dir=None,
                 files=None, label_list: Optional[Sequence[str]] = None):
        super().__init__(tokenizer=tokenizer, max_seq_length=max_seq_length,
                         data_dir=data_dir, files=files,
                         **({} if label_list is None else {"label_list": list(label_list)}))
        self.labels = [str(t) for t in (CONLL2003_LABELS if label_list is None else label_list)]

    @property
    def label_list(self):
        return list(self.labels)

    def default_file(self, split: str) -> str:
        names = {"train": ("eng.train", "train.txt"), "dev": ("eng.testa", "valid.txt"),
                 "test": ("eng.testb", "test.txt")}[split]
        for name in names:
            if tf.io.gfile.exists(os.path.join(self.data_dir, name)):
                return name
        return names[0]

    def get_examples(self, split: str) -> List[NerExample]:
        if split not in ("train", "dev", "test"):
            raise ValueError(f"conll2003: unknown split {split!r} (train, dev or test)")
        path = self.split_file(split)
        examples = read_conll(path, self.labels, missing_hint="--data_dir must hold the "
                              "CoNLL-2003 files (eng.train, eng.testa, eng.testb)")
        return require_examples(examples, path, split,
                                "sentences of `word ... NER-tag` lines (CoNLL-2003)")

    # ------------------------------------------------------------------ features
    def _word_pieces(self, examples, batch_size=50000) -> List[List[int]]:
        """WordPiece ids of every word of every example, flattened in order."""
        if examples and all(e.pieces is not None for e in examples):
            return [ids for e in examples for ids in e.pieces]
        words = [w for e in examples for w in e.words]
        unk = self._special_id("unk_id", "[UNK]")
        pieces = []
        for start in range(0, len(words), batch_size):
            ragged = self.tokenizer.tokenize(words[start:start + batch_size])
            # A word that tokenizes to nothing (e.g. a lone control character) still
            # needs a position to carry its label: use [UNK].
            pieces += [ids or [unk] for ids in ragged.to_list()]
        return pieces

    def _special_id(self, attribute, token):
        value = getattr(self.tokenizer, attribute, None)
        if value is None:
            value = self.tokenizer.vocab[token]
        return int(value)

    def convert_examples(self, examples: Sequence[NerExample], split: str = "train"
                         ) -> Dict[str, np.ndarray]:
        """Features plus host-side `example_index` [n] and `word_index` [n, L] (-1 = none)."""
        if self.tokenizer is None:
            raise ValueError("conll2003: convert_examples needs a tokenizer")
        length = self.max_seq_length
        cls_id = self._special_id("cls_id", "[CLS]")
        sep_id = self._special_id("sep_id", "[SEP]")
        pad_id = self._special_id("pad_id", "[PAD]")
        label_index = {label: i for i, label in enumerate(self.labels)}
        pieces = iter(self._word_pieces(examples))
        rows = []  # (example index, [(word index, piece ids)])
        for n, example in enumerate(examples):
            chunk, used = [], 0
            for w in range(len(example.words)):
                ids = next(pieces)[: length - 2]
                if chunk and used + len(ids) > length - 2:
                    rows.append((n, chunk))
                    chunk, used = [], 0
                chunk.append((w, ids))
                used += len(ids)
            rows.append((n, chunk))
        count = len(rows)
        word_ids = np.full((count, length), pad_id, np.int32)
        mask = np.zeros((count, length), np.int32)
        labels = np.full((count, length), IGNORE, np.int32)
        word_index = np.full((count, length), -1, np.int32)
        example_index = np.zeros((count,), np.int32)
        for row, (n, chunk) in enumerate(rows):
            tokens, position = [cls_id], 1
            for w, ids in chunk:
                labels[row, position] = label_index[examples[n].tags[w]]
                word_index[row, position] = w
                tokens += ids
                position += len(ids)
            tokens.append(sep_id)
            word_ids[row, :len(tokens)] = tokens
            mask[row, :len(tokens)] = 1
            example_index[row] = n
        return {"input_word_ids": word_ids, "input_mask": mask,
                "input_type_ids": np.zeros_like(word_ids), "label_ids": labels,
                "example_index": example_index, "word_index": word_index}

    def feature_spec(self):
        spec = {k: ([self.max_seq_length], "int64") for k in self.model_input_names}
        spec["label_ids"] = ([self.max_seq_length], "int64")
        return spec

    # ------------------------------------------------------------------ model
    def build_head(self, config):
        return make_head(config, len(self.labels), input_key="sequence_output")

    def loss(self, features, outputs):
        labels = features["label_ids"]
        weights = keras.ops.cast(keras.ops.greater_equal(labels, 0), "float32")
        return sparse_ce(keras.ops.maximum(labels, 0), outputs["logits"], weights)

    # ------------------------------------------------------------------ results
    def postprocess(self, outputs, features, examples) -> List[List[str]]:
        """Tag lists, one per example, from the first sub-token of each word."""
        best = np.argmax(np.asarray(outputs["logits"]), axis=-1)
        predictions = [["O"] * len(e.words) for e in examples]
        rows, positions = np.nonzero(features["word_index"] >= 0)
        for row, position in zip(rows.tolist(), positions.tolist()):
            n = int(features["example_index"][row])
            predictions[n][features["word_index"][row, position]] = \
                self.labels[best[row, position]]
        return predictions

    def serving_module(self, model, tokenizer, max_seq_length: int,
                       text_signatures: bool = True) -> "TaggerServing":
        """The SavedModel signatures of this task (bert_tf.export.saved_model writes them)."""
        return TaggerServing(model, tokenizer, max_seq_length, self.label_list,
                             text_signatures=text_signatures)

    def evaluate(self, predictions, examples) -> Dict[str, float]:
        return metrics_lib.entity_scores([e.tags for e in examples], predictions)

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        """conlleval's input: `word gold predicted` per line, a blank line per sentence."""
        lines = []
        for example, tags in zip(examples, predictions):
            lines += [f"{w} {g} {p}" for w, g, p in zip(example.words, example.tags, tags)]
            lines.append("")
        return [write_tsv_lines(os.path.join(output_dir, self.submission_name), lines)]


# ---------------------------------------------------------------------- serving
def words_in_windows(word_row, word_pieces, nrows, room: int):
    """`convert_examples`' windows in the graph: each row's words, in order, go into
    consecutive windows of at most `room` pieces, a word never split (a word longer than
    `room` keeps its first `room` pieces); a row without words still gets one window.

    `word_row` [words] (row of each word, ascending), `word_pieces` [words] (its piece
    count) -> (window of each word [words], global; windows per row [nrows]).

    >>> w, n = words_in_windows(tf.constant([0, 0, 0, 2], tf.int64),
    ...                         tf.constant([2, 3, 1, 9], tf.int64), 3, room=4)
    >>> w.numpy().tolist(), n.numpy().tolist()
    ([0, 1, 1, 3], [2, 1, 1])
    """
    word_row = tf.cast(word_row, tf.int64)
    kept = tf.minimum(tf.cast(word_pieces, tf.int64), room)
    # Pieces up to and including each word, counted from its row's start.
    total = tf.cumsum(kept)
    row_start = tf.math.unsorted_segment_min(total - kept, word_row, nrows)
    upto = total - tf.gather(row_start, word_row)

    def place(local, base, k):
        # Greedy, as the host loop: the unplaced words that fit after `base` go to window k.
        fits = (local < 0) & (upto - tf.gather(base, word_row) <= room)
        local = tf.where(fits, k, local)
        base = tf.maximum(base, tf.math.unsorted_segment_max(
            tf.where(fits, upto, tf.zeros_like(upto)), word_row, nrows))
        return local, base, k + 1

    local, _, _ = tf.while_loop(
        lambda local, base, k: tf.reduce_any(local < 0), place,
        (-tf.ones_like(kept), tf.zeros([nrows], tf.int64), tf.constant(0, tf.int64)))
    per_row = tf.maximum(tf.math.unsorted_segment_max(local, word_row, nrows) + 1, 1)
    first = tf.cumsum(per_row, exclusive=True)
    return tf.gather(first, word_row) + local, per_row


class TaggerServing(serving.TaskServing):
    """NER, the in-graph `Conll2003NerTask.convert_examples` + `postprocess`: per-word tags
    from each word's first sub-token.

    Text signature: `text` -> `words`, `tags` [b, max_words] strings ("" = padding),
    `tag_ids` [b, max_words] int32, `start_char` / `end_char` [b, max_words] int32 code
    point offsets into the input (end exclusive, -1 = padding), `num_words` [b].
    A word is a whitespace-separated token of the input (as CoNLL words are) that has at
    least one WordPiece; texts longer than a window are split into windows at word
    boundaries exactly as fine-tuning split them, so every word gets a tag.
    The ids signature returns `logits` [b, seq, C] and `tag_ids` [b, seq].
    """

    def __init__(self, model, tokenizer, max_seq_length, labels, text_signatures=True,
                 units: str = "words", entities: bool = False):
        super().__init__(model, tokenizer, max_seq_length, name="bert_tagger_serving",
                         text_signatures=text_signatures)
        self.labels = list(labels)
        self.labels_asset = tf.saved_model.Asset(serving.write_labels(self.labels))
        self._label_names = tf.constant(self.labels)
        if units not in ("words", "pieces"):
            raise ValueError(f"units={units!r}: words or pieces")
        self.units, self.entities = units, bool(entities)
        # Each tag's entity type (index into `types`, -1 for O) and whether it is a B-,
        # as metrics.get_entities reads tags.
        split = [metrics_lib.split_tag(t) for t in self.labels]
        types = sorted({kind for prefix, kind in split if prefix != "O"})
        self._entity_types = tf.constant(types or [""])
        self._tag_type = tf.constant([types.index(k) if p != "O" else -1 for p, k in split],
                                     tf.int32)
        self._tag_begins = tf.constant([p == "B" for p, _ in split])

    def from_ids(self, inputs):
        logits = tf.cast(self._model(inputs)["logits"], tf.float32)
        return {"logits": logits, "tag_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}

    def encode(self, a, b=None):
        return self._windows(a)[0]

    def _windows(self, text):
        """Packed windows, and per word: row, first piece's (window, position), offsets."""
        from bert_tf.text.packing import pack_inputs

        ids, starts, ends = self.tok.tokenize_with_offsets(text)
        nrows = ids.nrows()
        # A piece starts a new word when it is first in its row or a gap (whitespace)
        # separates it from the previous piece; pieces of "U.S." or "don't" touch.
        flat_start, flat_end = starts.flat_values, ends.flat_values
        position_in_row = tf.ragged.range(ids.row_lengths()).flat_values
        previous_end = tf.concat([[-1], flat_end[:-1]], 0)
        new_word = tf.equal(position_in_row, 0) | (flat_start > previous_end)
        if self.units == "pieces":  # every piece is a unit of its own (character input)
            new_word = tf.ones_like(new_word)
        word_of_piece = tf.cumsum(tf.cast(new_word, tf.int64)) - 1
        num_words = tf.reduce_sum(tf.cast(new_word, tf.int64))
        word_row = tf.boolean_mask(ids.value_rowids(), new_word)
        word_first_piece = tf.boolean_mask(tf.range(tf.size(new_word, tf.int64)), new_word)
        piece_in_word = tf.range(tf.size(new_word, tf.int64)) - tf.gather(
            word_first_piece, word_of_piece)
        pieces_per_word = tf.math.unsorted_segment_sum(
            tf.ones_like(word_of_piece), word_of_piece, num_words)
        room = self.max_seq_length - 2
        word_window, per_row = words_in_windows(word_row, pieces_per_word, nrows, room)
        keep = piece_in_word < room
        windows = tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(ids.flat_values, keep),
            tf.boolean_mask(tf.gather(word_window, word_of_piece), keep),
            nrows=tf.reduce_sum(per_row))
        position = tf.ragged.range(windows.row_lengths()).flat_values + 1  # after [CLS]
        first_position = tf.boolean_mask(position, tf.boolean_mask(new_word, keep))
        inputs = serving.cut_to_longest(
            pack_inputs(windows, None, self.max_seq_length, self.tok.cls_id,
                        self.tok.sep_id))
        inputs = {k: tf.cast(v, tf.int32) for k, v in inputs.items()}
        word_start = tf.boolean_mask(flat_start, new_word)
        word_end = tf.math.unsorted_segment_max(flat_end, word_of_piece, num_words)
        return inputs, word_row, word_window, first_position, word_start, word_end, nrows

    def from_text(self, text, b=None):
        (inputs, word_row, word_window, first_position, word_start, word_end,
         nrows) = self._windows(text)
        logits = self.from_ids(inputs)["logits"]
        # postprocess' rule: a word's tag is the argmax at its first sub-token.
        word_logits = tf.gather_nd(logits, tf.cast(
            tf.stack([word_window, first_position], axis=1), tf.int32))
        tag_ids = tf.argmax(word_logits, axis=-1, output_type=tf.int32)
        words = tf.strings.substr(tf.gather(text, word_row), word_start, word_end - word_start)

        def dense(values, default):
            return tf.RaggedTensor.from_value_rowids(values, word_row, nrows=nrows).to_tensor(
                default_value=default)

        if self.entities:
            out = self._entities(text, word_row, word_start, word_end, tag_ids, nrows)
            if self.units == "words":
                out.update(words=dense(words, ""),
                           tags=dense(tf.gather(self._label_names, tag_ids), ""),
                           tag_ids=dense(tag_ids, -1), num_words=out.pop("_num_units"))
            out.pop("_num_units", None)
            return out
        start_b, end_b = dense(word_start, 0), dense(word_end, 0)
        valid = dense(tf.ones_like(word_start, tf.bool), False)
        return {"words": dense(words, ""),
                "tags": dense(tf.gather(self._label_names, tag_ids), ""),
                "tag_ids": dense(tag_ids, -1),
                "start_char": tf.where(valid, serving.bytes_to_chars(text, start_b), -1),
                "end_char": tf.where(valid, serving.bytes_to_chars(text, end_b), -1),
                "num_words": tf.cast(tf.math.bincount(
                    tf.cast(word_row, tf.int32), minlength=tf.cast(nrows, tf.int32),
                    maxlength=tf.cast(nrows, tf.int32)), tf.int32)}

    def _entities(self, text, unit_row, unit_start, unit_end, tag_ids, nrows):
        """Entities of the units' tags as `metrics.get_entities` finds them: a unit of type
        X continues the entity before it when it is an I- (or bare) tag and the unit before
        it, in the same row, has type X. Per entity: `entity_text`, `entity_type`,
        `start_char`, `end_char` (code points, end exclusive) [b, max entities], padded
        with "" / -1, and `num_entities` [b]."""
        kind = tf.gather(self._tag_type, tag_ids)
        begins = tf.gather(self._tag_begins, tag_ids)
        previous_kind = tf.concat([[-1], kind[:-1]], 0)
        previous_row = tf.concat([[-1], unit_row[:-1]], 0)
        inside = kind >= 0
        continues = inside & ~begins & tf.equal(previous_row, unit_row) & tf.equal(
            previous_kind, kind)
        starts = inside & ~continues
        num_entities = tf.reduce_sum(tf.cast(starts, tf.int64))
        entity_of = tf.cumsum(tf.cast(starts, tf.int64)) - 1
        entity_end = tf.math.unsorted_segment_max(tf.boolean_mask(unit_end, inside),
                                                  tf.boolean_mask(entity_of, inside),
                                                  num_entities)
        entity_start = tf.boolean_mask(unit_start, starts)
        entity_row = tf.boolean_mask(unit_row, starts)

        def dense(values, default):
            return tf.RaggedTensor.from_value_rowids(values, entity_row, nrows=nrows).to_tensor(
                default_value=default)

        valid = dense(tf.ones_like(entity_start, tf.bool), False)
        texts = tf.strings.substr(tf.gather(text, entity_row), entity_start,
                                  entity_end - entity_start)

        def count(rows):
            return tf.cast(tf.math.bincount(tf.cast(rows, tf.int32),
                                            minlength=tf.cast(nrows, tf.int32),
                                            maxlength=tf.cast(nrows, tf.int32)), tf.int32)

        return {"entity_text": dense(texts, ""),
                "entity_type": dense(tf.gather(self._entity_types,
                                               tf.boolean_mask(kind, starts)), ""),
                "start_char": tf.where(valid, serving.bytes_to_chars(
                    text, dense(entity_start, 0)), -1),
                "end_char": tf.where(valid, serving.bytes_to_chars(
                    text, dense(entity_end, 0)), -1),
                "num_entities": count(entity_row), "_num_units": count(unit_row)}
