"""Token classification on the user's own files (`--task_name=token_classification`) and
KLUE-NER (`--task_name=klue-ner`): the CoNLL-2003 task's machinery (`tasks.ner`: a tag
on the first WordPiece of each unit, long sentences split into windows at unit
boundaries, the token head and masked loss) over three layouts, chosen per file:

* CoNLL-style columns (`.tsv`, `.txt`, any other name): `word ... tag` a line, the tag
  last, a blank line between sentences, `-DOCSTART-` lines skipped; IOB1 becomes BIO
  (`ner.read_conll`, CoNLL-2003's reader).
* JSON (`.json` list or `.jsonl`): one sentence an object, `{"tokens": [...], "tags":
  [...]}` (keys: --text_column, --label_column; an `id` / `guid` key is kept).
* Character-level (KLUE-NER's layout; a `## ` comment line or every line being one
  character, a tab and its tag): one character and its BIO tag a line, spaces included,
  a blank line between sentences; the `## ` line before a sentence names it (its text up
  to a tab is the sentence's id).

A test file may leave the tags out (CoNLL: a word alone on its line; JSON: no tags key).
Tags are `--label_list` in its order, else the sorted tags of the train file; a tag
outside them in dev/test is a one-line error naming file:line.

Characters and model tokens (character-level input). The sentence is tokenized whole,
with offsets (`BertTokenizer.tokenize_with_offsets`: whitespace splits words, which
WordPiece splits into pieces, each spanning the characters it came from). Every piece
is a unit of its own and learns the tag of its first character. Predictions go back to
characters as KLUE's baseline does: a piece's first character gets the piece's tag, its
other characters the I- tag of the same type (O stays O). A character no piece covers
(a space, a dropped control character) gets I-X when the pieces on both sides are in
one entity of type X (the piece after it continues it), else O; so an entity such as
`이기 아질리아` keeps its inner space, and the entities of the character tags are exactly
those of the piece tags, which is what the export returns.

Metrics: entity-level precision / recall / `f1` (micro, conlleval's entities: exact span
and type) and `f1_<TYPE>` per type, on words or characters; KLUE-NER adds its official
`entity_f1` (seqeval strict BIO, macro over types) and `char_f1` (macro over its 13
tags, O included), both over the characters that are not spaces, as KLUE's scorer.

`--do_predict` writes OUTPUT_DIR/predictions.tsv in the input's own layout (CoNLL:
`word TAB tag`; character-level: `## id`, then `character TAB tag`), or predictions.jsonl
(`{id, tokens, tags, entities}`) for JSON input: one sentence per test sentence, in order.
The export serves raw text: entities (`entity_text`, `entity_type`, `start_char`,
`end_char`, `num_entities`), and for word input also the whitespace words' `words`,
`tags`, `tag_ids`, `num_words` (`ner.TaggerServing`).

>>> char_tags_from_units(10, [(0, 2), (3, 4), (4, 6)], ["B-PS", "I-PS", "O"])
['B-PS', 'I-PS', 'I-PS', 'I-PS', 'O', 'O', 'O', 'O', 'O', 'O']
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_tf.core import output_guard
from bert_tf.tasks import metrics as metrics_lib
from bert_tf.tasks.base import TaskDataError, read_task_text, require_examples
from bert_tf.tasks.classification import file_of, prediction_file, row_id
from bert_tf.tasks.ner import (Conll2003NerTask, NerExample, TaggerServing, iob1_to_iob2,
                              read_conll)
from bert_tf.tasks.text_files import is_json, read_rows

KLUE_NER_LABELS = ["B-DT", "I-DT", "B-LC", "I-LC", "B-OG", "I-OG", "B-PS", "I-PS",
                   "B-QT", "I-QT", "B-TI", "I-TI", "O"]


@dataclasses.dataclass(frozen=True)
class CharExample:
    """A character-level sentence: `text` and one tag per character (None: untagged)."""

    guid: str
    text: str
    tags: Optional[List[str]]
    source: str = ""
    lines: Tuple[int, ...] = ()  # the line of each character (error messages)


def char_tags_from_units(length: int, spans: Sequence[Tuple[int, int]],
                         unit_tags: Sequence[str]) -> List[str]:
    """The character tags of a sentence of `length` characters from its units' tags
    (`spans`: [start, end) of each unit, in order): module docstring."""
    tags = ["O"] * length
    previous_kind, previous_end = None, 0
    for (start, end), tag in zip(spans, unit_tags):
        prefix, kind = metrics_lib.split_tag(tag)
        inside = "O" if prefix == "O" else "I-" + kind
        if prefix == "I" and kind == previous_kind:  # continues: the gap is inside too
            tags[previous_end:start] = [inside] * (start - previous_end)
        tags[start] = tag
        tags[start + 1:end] = [inside] * (end - start - 1)
        previous_kind = None if prefix == "O" else kind
        previous_end = end
    return tags


def char_entities(text: str, tags: Sequence[str]) -> List[dict]:
    """The entities of character tags: text, type, start and end (exclusive) character."""
    return [{"entity_text": text[s:e + 1], "entity_type": kind, "start_char": s,
             "end_char": e + 1} for kind, s, e in metrics_lib.get_entities(tags)]


def word_entities(words: Sequence[str], tags: Sequence[str]) -> List[dict]:
    """The entities of word tags, with character offsets into the words joined by spaces
    (how the export sees a sentence of words)."""
    starts, position = [], 0
    for word in words:
        starts.append(position)
        position += len(word) + 1
    text = " ".join(words)
    return [{"entity_text": text[starts[s]:starts[e] + len(words[e])], "entity_type": kind,
             "start_char": starts[s], "end_char": starts[e] + len(words[e])}
            for kind, s, e in metrics_lib.get_entities(tags)]


def is_char_level(lines: Sequence[str]) -> bool:
    """KLUE-NER's layout: a `## ` comment, or every line (of the first 200 that are not
    blank) is one character, a tab and a tag."""
    data = [ln.rstrip("\r") for ln in lines if ln.strip()][:200]
    if any(ln.startswith("## ") for ln in data):
        return True
    return bool(data) and all(len(ln) > 2 and ln[1] == "\t" and "\t" not in ln[2:]
                              for ln in data)


def read_char_level(path: str, text: str, tagged: bool = True) -> List[CharExample]:
    """Sentences of a character-level file (module docstring)."""
    examples, chars, tags, lines, comment = [], [], [], [], ""

    def flush():
        nonlocal chars, tags, lines
        if chars:
            guid = comment.split("\t", 1)[0].strip() or str(len(examples))
            examples.append(CharExample(guid, "".join(chars),
                                        tags if all(t is not None for t in tags) else None,
                                        f"{path}:{lines[0]}", tuple(lines)))
        chars, tags, lines = [], [], []

    for line_no, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if line.startswith("## "):
            flush()
            comment = line[3:]
            continue
        if not line:
            flush()
            continue
        if len(line) > 2 and line[1] == "\t" and line[2:].strip() and "\t" not in line[2:]:
            chars.append(line[0])
            tags.append(line[2:].strip())
        elif len(line) == 1 and not tagged:
            chars.append(line)
            tags.append(None)
        else:
            raise TaskDataError(f"{path}:{line_no}: expected one character, a tab and its "
                                f"tag (KLUE-NER's layout), got {line!r}")
        lines.append(line_no)
    flush()
    return examples


class TokenClassificationTask(Conll2003NerTask):
    """`--task_name=token_classification` (module docstring)."""

    name = "token_classification"
    # `units` ("words" or "pieces") is recorded in task_config.json, not a flag: what the
    # export serves follows the layout the model was trained on.
    option_names = ("label_list", "text_column", "label_column", "id_column", "units")
    submission_name = "predictions.tsv"
    fixed_labels: Optional[List[str]] = None
    fixed_units: Optional[str] = None
    default_files: Dict[str, str] = {}

    def __init__(self, tokenizer=None, max_seq_length: Optional[int] = None, data_dir=None,
                 files=None, label_list: Optional[Sequence[str]] = None,
                 text_column: Optional[str] = None, label_column: Optional[str] = None,
                 id_column: Optional[str] = None, units: Optional[str] = None):
        super().__init__(tokenizer=tokenizer, max_seq_length=max_seq_length,
                         data_dir=data_dir, files=files, label_list=label_list)
        extra = dict(text_column=text_column, label_column=label_column, id_column=id_column,
                     units=units)
        self.options.update({k: v for k, v in extra.items() if v is not None})
        self.text_column = text_column or "tokens"
        self.label_column = label_column or "tags"
        self.id_column = id_column
        self._labels = ([str(t) for t in label_list] if label_list
                        else list(self.fixed_labels) if self.fixed_labels else None)

    # ------------------------------------------------------------------ labels
    @property
    def labels(self) -> List[str]:
        """--label_list, fixed, or the sorted tags of the train file ([] without one)."""
        if self._labels is None:
            if not (self.files.get("train") or self.data_dir):
                return []
            self._labels = sorted({t for e in self._read("train") for t in (e.tags or ())})
        return self._labels

    @labels.setter
    def labels(self, value):  # Conll2003NerTask.__init__ assigns its own default
        pass

    def build_head(self, config):
        if not self.labels:
            raise TaskDataError(f"{self.name}: no tags to size the tagger; pass --train_file "
                                f"(its tags, sorted) or --label_list (a fine-tuned model "
                                f"dir's task_config.json lists them)")
        return super().build_head(config)

    # ------------------------------------------------------------------ reading
    def default_file(self, split: str) -> str:
        if split not in self.default_files:
            raise TaskDataError(f"{self.name}: no file for the {split} split; pass "
                                f"--{'validation' if split == 'dev' else split}_file")
        return self.default_files[split]

    def get_examples(self, split: str) -> list:
        if split not in ("train", "dev", "test"):
            raise ValueError(f"{self.name}: unknown split {split!r} (train, dev or test)")
        examples = self._read(split)
        if split != "train" or self._labels is not None:
            self._check_tags(examples)
        return examples

    def _read(self, split: str) -> list:
        path = self.split_file(split)
        hint = (f"--data_dir must hold {', '.join(sorted(set(self.default_files.values())))}"
                if self.default_files else "check --train_file, --validation_file, "
                "--test_file")
        tagged = split != "test"
        if is_json(path):
            examples = self._read_json(path, read_rows(path, hint), tagged)
        else:
            text = read_task_text(path, hint, encoding="utf-8")
            lines = text.split("\n")
            examples = (read_char_level(path, text, tagged) if is_char_level(lines)
                        else read_conll(path, text=text, tags_optional=not tagged,
                                        hint="give every line its tag (only --test_file "
                                             "may leave them out)"))
        return require_examples(examples, path, split,
                                "sentences of `word ... tag` lines, character-level lines "
                                "or JSON objects with tokens and tags")

    def _read_json(self, path, rows, tagged) -> List[NerExample]:
        id_name = row_id(rows, self.id_column)
        examples = []
        for index, row in enumerate(rows):
            words = row.get(self.text_column)
            tags = row.get(self.label_column) if tagged else row.get(self.label_column, None)
            if not isinstance(words, list) or (tags is not None and not isinstance(tags, list)):
                raise TaskDataError(f"{row.source}: {self.text_column!r} and "
                                    f"{self.label_column!r} must be lists (one token, one "
                                    f"tag each)")
            if tags is not None and len(tags) != len(words):
                raise TaskDataError(f"{row.source}: {len(words)} tokens but {len(tags)} tags")
            examples.append(NerExample(
                str(row.get(id_name)) if id_name else str(index), [str(w) for w in words],
                iob1_to_iob2([str(t) for t in tags]) if tags is not None else None,
                row.source))
        return examples

    def _check_tags(self, examples) -> None:
        known = set(self.labels)
        for e in examples:
            for i, tag in enumerate(e.tags or ()):
                if tag not in known:
                    where = (f"{file_of(e.source)}:{e.lines[i]}" if isinstance(e, CharExample)
                             else e.source)
                    given = ("--label_list" if self.options.get("label_list") else
                             "its tags" if self.fixed_labels else "the tags of --train_file")
                    raise TaskDataError(f"{where}: tag {tag!r} is not one of {given} "
                                        f"{self.labels}; fix the line or pass --label_list")

    # ------------------------------------------------------------------ features
    def _units(self, examples: Sequence[CharExample]) -> List[List[Tuple[int, int, int]]]:
        """Each character sentence's pieces: (start char, end char, piece id)."""
        if self.tokenizer is None:
            raise ValueError(f"{self.name}: character-level input needs a tokenizer")
        units = []
        for begin in range(0, len(examples), 2048):
            chunk = examples[begin:begin + 2048]
            ids, starts, ends = self.tokenizer.tokenize_with_offsets([e.text for e in chunk])
            for e, row_ids, row_starts, row_ends in zip(chunk, ids.to_list(), starts.to_list(),
                                                        ends.to_list()):
                char_of_byte = _char_of_byte(e.text)
                units.append([(char_of_byte[s], char_of_byte[t], i)
                              for i, s, t in zip(row_ids, row_starts, row_ends)])
        return units

    def _unit_examples(self, examples) -> List[NerExample]:
        """What `Conll2003NerTask` converts: word examples as they are (an untagged one
        with placeholder tags), a character sentence as its pieces."""
        placeholder = self.labels[0] if self.labels else "O"
        if not examples or not isinstance(examples[0], CharExample):
            return [e if e.tags is not None else dataclasses.replace(
                e, tags=[placeholder] * len(e.words)) for e in examples]
        out = []
        for e, units in zip(examples, self._units(examples)):
            out.append(NerExample(e.guid, [e.text[s:t] for s, t, _ in units],
                                  [e.tags[s] if e.tags else placeholder for s, _, _ in units],
                                  e.source, pieces=[[i] for _, _, i in units]))
        return out

    def convert_examples(self, examples, split: str = "train") -> Dict[str, np.ndarray]:
        features = super().convert_examples(self._unit_examples(examples), split)
        if examples and all(e.tags is None for e in examples):
            features.pop("label_ids")
        return features

    def postprocess(self, outputs, features, examples) -> List[List[str]]:
        """Tags per word, or per character for character-level input."""
        unit_examples = self._unit_examples(examples)
        unit_tags = super().postprocess(outputs, features, unit_examples)
        if not examples or not isinstance(examples[0], CharExample):
            return unit_tags
        return [char_tags_from_units(len(e.text), [(s, t) for s, t, _ in units], tags)
                for e, units, tags in zip(examples, self._units(examples), unit_tags)]

    def entities(self, prediction: Sequence[str], example) -> List[dict]:
        """The entities of one sentence's predicted tags, as the export returns them."""
        if isinstance(example, CharExample):
            return char_entities(example.text, prediction)
        return word_entities(example.words, prediction)

    def serving_module(self, model, tokenizer, max_seq_length: int,
                       text_signatures: bool = True) -> TaggerServing:
        """Entities (and per-word tags for word input) from raw text; `units` is what the
        task was trained on: the train layout's, recorded in task_config.json."""
        return TaggerServing(model, tokenizer, max_seq_length, self.label_list,
                             text_signatures=text_signatures, units=self.unit_kind(),
                             entities=True)

    def unit_kind(self) -> str:
        """"pieces" for character-level training data, else "words"."""
        recorded = self.fixed_units or self.options.get("units")
        if recorded:
            return recorded
        return "pieces" if self.char_level else "words"

    @property
    def char_level(self) -> bool:
        path = self.files.get("train") or (self.data_dir and self.default_files.get("train"))
        if not path or is_json(path):
            return False
        if self.data_dir and not self.files.get("train"):
            path = os.path.join(self.data_dir, path)
        return is_char_level(read_task_text(path, "").split("\n", 400)[:400])

    def task_config(self):
        config = super().task_config()
        if not self.fixed_units and (self.files.get("train") or self.data_dir):
            config["units"] = self.unit_kind()
        return config

    # ------------------------------------------------------------------ results
    def evaluate(self, predictions, examples) -> Dict[str, float]:
        gold = [e.tags for e in examples]
        scores = metrics_lib.entity_scores(gold, predictions)
        scores.update({f"f1_{kind}": f1 for kind, f1 in
                       metrics_lib.entity_f1_per_type(gold, predictions).items()})
        return scores

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        """OUTPUT_DIR/predictions.tsv in the input's layout, or .jsonl (module docstring)."""
        if not examples:
            return []
        path = prediction_file(output_dir, file_of(examples[0].source))
        lines = []
        for e, tags in zip(examples, predictions):
            if path.endswith(".jsonl"):
                lines.append(json.dumps({"id": e.guid, "tokens": e.words, "tags": tags,
                                         "entities": self.entities(tags, e)},
                                        ensure_ascii=False))
            elif isinstance(e, CharExample):
                lines += [f"## {e.guid}"] + [f"{c}\t{t}" for c, t in zip(e.text, tags)] + [""]
            else:
                lines += [f"{w}\t{t}" for w, t in zip(e.words, tags)] + [""]
        output_guard.write_text(path, "\n".join(lines) + "\n")
        return [path]


def _char_of_byte(text: str) -> List[int]:
    """Character index of every UTF-8 byte offset of `text` (and of its end)."""
    index = []
    for n, c in enumerate(text):
        index += [n] * len(c.encode("utf-8"))
    return index + [len(text)]


class KlueNerTask(TokenClassificationTask):
    """KLUE-NER: the official character-level files; `entity_f1` and `char_f1` as KLUE
    reports them (module docstring), beside the micro entity F1."""

    name = "klue-ner"
    option_names = ("label_list",)
    fixed_labels = KLUE_NER_LABELS
    fixed_units = "pieces"
    default_files = {"train": "klue-ner-v1.1_train.tsv", "dev": "klue-ner-v1.1_dev.tsv",
                     "test": "klue-ner-v1.1_dev.tsv"}  # KLUE's test labels are not public
    primary_metric = "entity_f1"

    def evaluate(self, predictions, examples) -> Dict[str, float]:
        """The micro scores, and KLUE's `entity_f1` / `char_f1` over the characters that
        are not spaces, sentence by sentence. KLUE's baseline also counts each sentence's
        [CLS] and [SEP] positions as two "O" characters and scores only the characters
        that fit in max_seq_length; here every character is scored (sentences are read
        in windows) and nothing else."""
        scores = super().evaluate(predictions, examples)
        kept = [[i for i, c in enumerate(e.text) if not c.isspace()] for e in examples]
        gold = [[e.tags[i] for i in keep] for e, keep in zip(examples, kept)]
        predicted = [[p[i] for i in keep] for p, keep in zip(predictions, kept)]
        scores["entity_f1"] = metrics_lib.klue_ner_entity_macro_f1(gold, predicted)
        scores["char_f1"] = metrics_lib.klue_ner_char_macro_f1(gold, predicted, self.labels)
        return scores
