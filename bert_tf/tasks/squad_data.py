"""SQuAD v1.1 / v2.0 data: examples and sliding-window features, as the original run_squad.

* Reading: the context is split into whitespace-separated *doc tokens*; a character ->
  doc-token map turns the answer's `answer_start` into a doc-token span. A training
  answer whose text is not found at `answer_start` is logged with its question id and
  the question is skipped.
* Features: every doc token is WordPiece-tokenized on its own (sub-token -> doc-token
  maps both ways); the answer's sub-token span is tightened to the tokenized answer
  text; the document is cut into windows of at most
  `max_seq_length - len(query) - 3` sub-tokens, each starting `doc_stride` after the
  previous one; a window is `[CLS] query [SEP] window [SEP]` (query truncated to
  `max_query_length`). Each doc sub-token is marked `token_is_max_context` in the window
  where it has the most context on its shorter side (`is_max_context`). Training labels
  point at [CLS] (position 0) for v2.0 impossible questions and for windows that do not
  contain the whole answer.

Example (a toy tokenizer stands in for `BertTokenizer`):

>>> ex = examples_from_json([{"paragraphs": [{"context": "Paris is in France.",
...     "qas": [{"id": "q1", "question": "Where is Paris?",
...              "answers": [{"text": "France", "answer_start": 12}]}]}]}],
...     is_training=True)
>>> ex[0].doc_tokens, ex[0].start_position, ex[0].end_position
(['Paris', 'is', 'in', 'France.'], 3, 3)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bert_tf.tasks.base import TaskDataError, read_task_text

# The original's first feature id; kept so unique ids look the same in logs and records.
FIRST_UNIQUE_ID = 1000000000

#: a batched WordPiece tokenizer: texts -> one list of ids per text
IdsFn = Callable[[Sequence[str]], List[List[int]]]
#: a batched basic (whitespace + punctuation, optional lower-casing) tokenizer
BasicFn = Callable[[Sequence[str]], List[List[str]]]


# ---------------------------------------------------------------------- examples
@dataclasses.dataclass
class SquadExample:
    """One question on one context, split into whitespace doc tokens.

    `answers` holds every gold text (what evaluation compares against; [] for a v2.0
    impossible question). `orig_answer_text`, `start_position`, `end_position` (doc-token
    indices, inclusive) are set for training examples only.
    """

    qas_id: str
    question_text: str
    doc_tokens: List[str]
    answers: List[str] = dataclasses.field(default_factory=list)
    orig_answer_text: Optional[str] = None
    start_position: Optional[int] = None
    end_position: Optional[int] = None
    is_impossible: bool = False


def is_whitespace(ch: str) -> bool:
    """The separators of doc tokens: space, tab, CR, LF and U+202F (as the original).

    >>> is_whitespace("\\u202f"), is_whitespace("\\u00a0")
    (True, False)
    """
    return ch in " \t\r\n" or ord(ch) == 0x202F


def split_doc_tokens(context: str):
    """(doc_tokens, char_to_word_offset): whitespace-separated tokens and, for each
    character, the index of the token it belongs to (whitespace: the token before).

    >>> split_doc_tokens(" ab  c")
    (['ab', 'c'], [-1, 0, 0, 0, 0, 1])
    """
    doc_tokens: List[str] = []
    char_to_word_offset: List[int] = []
    prev_is_whitespace = True
    for ch in context:
        if is_whitespace(ch):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(ch)
            else:
                doc_tokens[-1] += ch
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def read_squad_examples(input_file: str, is_training: bool,
                        version_2_with_negative: bool = False) -> List[SquadExample]:
    """Reads an official SQuAD json (v1.1 or v2.0 layout) into SquadExamples."""
    text = read_task_text(input_file, "pass the official SQuAD json")
    try:
        dataset = json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{input_file}:{e.lineno}:{e.colno}: not valid JSON ({e.msg}); "
                            f"expected the official SQuAD layout "
                            f"{{\"version\": ..., \"data\": [...]}}") from None
    except RecursionError:
        raise TaskDataError(f"{input_file}: JSON nested too deeply; expected the official "
                            f"SQuAD layout") from None
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise TaskDataError(f"{input_file}: no top-level `data` list; expected the "
                            f"official SQuAD layout {{\"version\": ..., \"data\": [...]}}")
    return examples_from_json(dataset["data"], is_training, version_2_with_negative,
                              source=input_file)


def examples_from_json(articles: Sequence[Mapping], is_training: bool,
                       version_2_with_negative: bool = False,
                       source: str = "<json>") -> List[SquadExample]:
    """SquadExamples from the `data` list of a SQuAD json (see module example).

    Training: a possible question must have exactly one answer (else TaskDataError
    naming the question); an answer whose text does not occur at its answer_start is
    logged and the question skipped, as the original does.
    """
    examples: List[SquadExample] = []

    def objects(value, what):  # a list of JSON objects, or a message naming the key
        if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
            raise TaskDataError(f"{source}: {what} must be a list of objects; expected the "
                                f"official SQuAD layout")
        return value

    for article in objects(articles, "`data`"):
        title = article.get("title", "?")
        for paragraph in objects(article.get("paragraphs", []),
                                 f"`paragraphs` of article {title!r}"):
            if not isinstance(paragraph.get("context"), str):
                raise TaskDataError(f"{source}: a paragraph without a `context` string (in "
                                    f"article {title!r})")
            doc_tokens, char_to_word_offset = split_doc_tokens(paragraph["context"])
            for qa in objects(paragraph.get("qas", []), f"`qas` (in article {title!r})"):
                qas_id = str(qa.get("id", ""))
                if not isinstance(qa.get("question"), str) or not qas_id:
                    raise TaskDataError(f"{source}: question {qas_id or '?'} lacks `id` or a "
                                        f"`question` string")
                answers = qa.get("answers", [])
                if not isinstance(answers, list) or not all(
                        isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
                    raise TaskDataError(f"{source}: question {qas_id}: `answers` must be a list "
                                        f"of {{\"text\": ..., \"answer_start\": ...}} objects")
                is_impossible = bool(qa.get("is_impossible", False)) and version_2_with_negative
                example = SquadExample(qas_id=qas_id, question_text=qa["question"],
                                       doc_tokens=doc_tokens,
                                       answers=[a["text"] for a in answers],
                                       is_impossible=is_impossible)
                if is_training:
                    if is_impossible:
                        example.start_position = example.end_position = -1
                        example.orig_answer_text = ""
                    else:
                        if len(answers) != 1:
                            raise TaskDataError(
                                f"{source}: training question {qas_id} has {len(answers)} "
                                f"answers; training needs exactly one per question (v2.0 "
                                f"data: pass --version_2_with_negative)")
                        if not _locate_answer(example, answers[0], char_to_word_offset):
                            continue
                examples.append(example)
    return examples


def _locate_answer(example: SquadExample, answer: Mapping, char_to_word_offset) -> bool:
    """Sets the training span of `example`; False (logged) when the text is not there."""
    text = answer.get("text", "")
    offset = answer.get("answer_start")
    last = (offset + len(text) - 1) if isinstance(offset, int) else -1
    if not text or not isinstance(offset, int) or offset < 0 or last >= len(char_to_word_offset):
        logging.warning("SQuAD: question %s: answer %r with answer_start %r lies outside "
                        "the context; skipping the question", example.qas_id, text, offset)
        return False
    # An answer_start on whitespace before the first word maps to word -1: use word 0.
    start, end = max(char_to_word_offset[offset], 0), char_to_word_offset[last]
    actual = " ".join(example.doc_tokens[start:end + 1])
    # Compare whitespace-normalized: answers may differ from the context in spacing only.
    cleaned = " ".join(text.split())
    if actual.find(cleaned) == -1:
        logging.warning("SQuAD: question %s: could not find answer %r at answer_start %d "
                        "(the context there reads %r); skipping the question",
                        example.qas_id, cleaned, offset, actual)
        return False
    example.orig_answer_text = text
    example.start_position, example.end_position = start, end
    return True


# ---------------------------------------------------------------------- features
def improve_answer_span(doc_pieces: Sequence[int], start: int, end: int,
                        answer_pieces: Sequence[int]):
    """The smallest sub-span of [start, end] whose sub-tokens equal the tokenized answer.

    The doc-token span can be wider than the answer (answer "1895" in the doc token
    "(1895-1943)."): tokenizing the answer text on its own finds the tighter span.

    >>> improve_answer_span([5, 7, 8, 9], 0, 3, [7, 8])
    (1, 2)
    >>> improve_answer_span([5, 7], 0, 1, [4])
    (0, 1)
    """
    answer = list(answer_pieces)
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if list(doc_pieces[new_start:new_end + 1]) == answer:
                return new_start, new_end
    return start, end


def doc_spans(num_doc_pieces: int, max_tokens_for_doc: int, doc_stride: int):
    """(start, length) windows over the doc sub-tokens, `doc_stride` apart.

    >>> doc_spans(10, 4, 3)
    [(0, 4), (3, 4), (6, 4)]
    >>> doc_spans(0, 4, 3)
    []
    """
    spans, start = [], 0
    while start < num_doc_pieces:
        length = min(num_doc_pieces - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_doc_pieces:
            break
        start += min(length, doc_stride)
    return spans


def is_max_context(spans: Sequence[tuple], span_index: int, position: int) -> bool:
    """Whether window `span_index` gives doc sub-token `position` its most context.

    Score = min(tokens left, tokens right) + 0.01 * window length; the first best wins.

    >>> is_max_context([(0, 6), (3, 6)], 0, 5), is_max_context([(0, 6), (3, 6)], 1, 5)
    (False, True)
    >>> is_max_context([(0, 4), (3, 4)], 0, 3)  # a tie: the first window wins
    True
    """
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == span_index


def convert_examples_to_features(examples: Sequence[SquadExample], tokenize_ids: IdsFn,
                                 cls_id: int, sep_id: int, max_seq_length: int = 384,
                                 doc_stride: int = 128, max_query_length: int = 64,
                                 is_training: bool = False) -> Dict[str, np.ndarray]:
    """Sliding-window features of `examples` as numpy arrays (first axis = window).

    Keys: `input_word_ids`, `input_mask`, `input_type_ids` [n, max_seq_length] int32;
    `unique_ids` int64, `example_index`, `doc_span_index` int32 [n];
    `token_to_orig_map` [n, max_seq_length] int32 (doc-token index of each position, -1
    outside the document part); `token_is_max_context` [n, max_seq_length] bool; and for
    training `start_positions`, `end_positions` int32 [n].

    `tokenize_ids` is a batched WordPiece tokenizer (texts -> lists of ids); every
    distinct doc token is tokenized once.

    >>> vocab = {"[CLS]": 1, "[SEP]": 2, "who": 3, "a": 4, "b": 5, "c": 6}
    >>> tok = lambda texts: [[vocab[w] for w in t.lower().split()] for t in texts]
    >>> ex = SquadExample("q", "who", ["a", "b", "c"], orig_answer_text="c",
    ...                   start_position=2, end_position=2)
    >>> f = convert_examples_to_features([ex], tok, 1, 2, max_seq_length=6, doc_stride=1,
    ...                                  max_query_length=2, is_training=True)
    >>> f["input_word_ids"].tolist()
    [[1, 3, 2, 4, 5, 2], [1, 3, 2, 5, 6, 2]]
    >>> f["start_positions"].tolist(), f["token_is_max_context"][1].tolist()[3:5]
    ([0, 4], [False, True])
    """
    if max_seq_length <= max_query_length + 3:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for the document "
                         f"after a query of max_query_length={max_query_length} and 3 "
                         f"special tokens; raise max_seq_length or lower max_query_length")
    if doc_stride <= 0:
        raise ValueError(f"doc_stride must be positive, got {doc_stride}")
    distinct = sorted({t for ex in examples for t in ex.doc_tokens})
    pieces_of = dict(zip(distinct, tokenize_ids(distinct))) if distinct else {}
    queries = tokenize_ids([ex.question_text for ex in examples]) if examples else []
    answer_ids = {}
    if is_training:
        trainable = [i for i, ex in enumerate(examples) if not ex.is_impossible]
        texts = [examples[i].orig_answer_text or "" for i in trainable]
        answer_ids = dict(zip(trainable, tokenize_ids(texts) if texts else []))

    rows = collections.defaultdict(list)
    for example_index, example in enumerate(examples):
        query = list(queries[example_index])[:max_query_length]
        tok_to_orig, orig_to_tok, doc_pieces = [], [], []
        for i, token in enumerate(example.doc_tokens):
            orig_to_tok.append(len(doc_pieces))
            for piece in pieces_of[token]:
                tok_to_orig.append(i)
                doc_pieces.append(piece)

        tok_start = tok_end = None
        if is_training and example.is_impossible:
            tok_start = tok_end = -1
        elif is_training:
            tok_start = orig_to_tok[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end = orig_to_tok[example.end_position + 1] - 1
            else:
                tok_end = len(doc_pieces) - 1
            tok_start, tok_end = improve_answer_span(doc_pieces, tok_start, tok_end,
                                                     answer_ids[example_index])

        budget = max_seq_length - len(query) - 3
        spans = doc_spans(len(doc_pieces), budget, doc_stride)
        for span_index, (span_start, span_length) in enumerate(spans):
            ids = [cls_id] + query + [sep_id]
            types = [0] * len(ids)
            to_orig = [-1] * len(ids)
            max_context = [False] * len(ids)
            for i in range(span_length):
                position = span_start + i
                to_orig.append(tok_to_orig[position])
                max_context.append(is_max_context(spans, span_index, position))
                ids.append(doc_pieces[position])
                types.append(1)
            ids.append(sep_id)
            types.append(1)
            to_orig.append(-1)
            max_context.append(False)
            pad = max_seq_length - len(ids)
            rows["input_word_ids"].append(ids + [0] * pad)
            rows["input_mask"].append([1] * len(ids) + [0] * pad)
            rows["input_type_ids"].append(types + [0] * pad)
            rows["token_to_orig_map"].append(to_orig + [-1] * pad)
            rows["token_is_max_context"].append(max_context + [False] * pad)
            rows["example_index"].append(example_index)
            rows["doc_span_index"].append(span_index)
            if is_training:
                start = end = 0  # [CLS]: impossible, or the answer is not in this window
                span_end = span_start + span_length - 1
                if (not example.is_impossible and tok_start >= span_start
                        and tok_end <= span_end):
                    offset = len(query) + 2
                    start = tok_start - span_start + offset
                    end = tok_end - span_start + offset
                rows["start_positions"].append(start)
                rows["end_positions"].append(end)

    n = len(rows["example_index"])
    features = {
        "input_word_ids": np.asarray(rows["input_word_ids"], np.int32).reshape(n, max_seq_length),
        "input_mask": np.asarray(rows["input_mask"], np.int32).reshape(n, max_seq_length),
        "input_type_ids": np.asarray(rows["input_type_ids"], np.int32).reshape(n, max_seq_length),
        "token_to_orig_map": np.asarray(rows["token_to_orig_map"],
                                        np.int32).reshape(n, max_seq_length),
        "token_is_max_context": np.asarray(rows["token_is_max_context"],
                                           bool).reshape(n, max_seq_length),
        "unique_ids": FIRST_UNIQUE_ID + np.arange(n, dtype=np.int64),
        "example_index": np.asarray(rows["example_index"], np.int32),
        "doc_span_index": np.asarray(rows["doc_span_index"], np.int32),
    }
    if is_training:
        features["start_positions"] = np.asarray(rows["start_positions"], np.int32)
        features["end_positions"] = np.asarray(rows["end_positions"], np.int32)
    return features


# ---------------------------------------------------------------------- tokenizer glue
def tokenizer_ids_fn(tokenizer, batch_size: int = 4096) -> IdsFn:
    """Batched WordPiece ids from a BertTokenizer (`tokenize` -> RaggedTensor)."""

    def tokenize_ids(texts):
        out = []
        for i in range(0, len(texts), batch_size):
            out.extend(tokenizer.tokenize(list(texts[i:i + batch_size])).to_list())
        return out

    return tokenize_ids


def tokenizer_basic_fn(tokenizer, batch_size: int = 4096) -> BasicFn:
    """Batched basic tokens (str) from a BertTokenizer (`basic_tokenize` -> RaggedTensor)."""

    def basic_tokenize(texts):
        out = []
        for i in range(0, len(texts), batch_size):
            rows = tokenizer.basic_tokenize(list(texts[i:i + batch_size])).to_list()
            out.extend([[w.decode("utf-8") if isinstance(w, bytes) else w for w in row]
                        for row in rows])
        return out

    return basic_tokenize


def tokenizer_id_to_token(tokenizer) -> Callable[[int], str]:
    """id -> WordPiece string from a BertTokenizer."""
    vocab = getattr(tokenizer, "vocab", None)
    if isinstance(vocab, (list, tuple)):
        return lambda i: vocab[i]
    return lambda i: tokenizer.id_to_token(i)
