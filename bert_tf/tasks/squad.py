"""SQuAD v1.1 / v2.0: examples, sliding-window features, span head, loss, answers.

Behaviour follows the original BERT `run_squad` step by step (reimplemented here):

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
  where it has the most context on its shorter side. Training labels point at [CLS]
  (position 0) for v2.0 impossible questions and for windows that do not contain the
  whole answer.
* Head and loss: a dense [H, 2] on the sequence output gives start and end logits; the
  loss is the mean of the start and end softmax cross-entropies over all positions.
* Answers: the `n_best_size` best starts and ends of every window form candidate spans
  (inside the document part, end >= start, at most `max_answer_length` sub-tokens,
  start in its max-context window); the best ones over all windows of a question are
  mapped back to the original context text (`get_final_text`). v2.0: the null score is
  the smallest [CLS] start+end logit over the windows; the answer is "" when
  `null score - best span score > null_score_diff_threshold`.
* Files as the original writes them: predictions.json, nbest_predictions.json and, for
  v2.0, null_odds.json; eval_results.json holds exact_match and f1 (official scripts).

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
import math
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bert_tf.tasks import squad_metrics
from bert_tf.tasks.base import Task, TaskDataError

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
    import tensorflow as tf  # gfile: data may live on gs://

    try:
        with tf.io.gfile.GFile(input_file) as f:
            dataset = json.load(f)
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{input_file}: not valid JSON ({e}); expected the official "
                            f"SQuAD layout {{\"version\": ..., \"data\": [...]}}") from None
    if not isinstance(dataset, dict) or "data" not in dataset:
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
    for article in articles:
        for paragraph in article.get("paragraphs", ()):
            if "context" not in paragraph:
                raise TaskDataError(f"{source}: a paragraph without `context` (in article "
                                    f"{article.get('title', '?')!r})")
            doc_tokens, char_to_word_offset = split_doc_tokens(paragraph["context"])
            for qa in paragraph.get("qas", ()):
                qas_id = str(qa.get("id", ""))
                if "question" not in qa or not qas_id:
                    raise TaskDataError(f"{source}: question {qas_id or '?'} lacks `id` or "
                                        f"`question`")
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


# ---------------------------------------------------------------------- answers
@dataclasses.dataclass
class SquadPrediction:
    """The answer to one question: text, the n-best list as nbest_predictions.json holds
    it, and for v2.0 the null odds (null score - best span score)."""

    qas_id: str
    text: str
    nbest: List[dict]
    null_score_diff: Optional[float] = None


def _strip_spaces(text: str):
    """(text without " ", map from its indices to indices in `text`)."""
    chars, index_map = [], []
    for i, ch in enumerate(text):
        if ch == " ":
            continue
        index_map.append(i)
        chars.append(ch)
    return "".join(chars), index_map


def get_final_text(pred_text: str, orig_text: str, orig_basic_tokens: Sequence[str]) -> str:
    """Maps a detokenized prediction back onto the original text.

    `pred_text` is the WordPiece span with "##" joins removed (lower-cased and
    accent-stripped for uncased models, punctuation split off); `orig_text` is the
    whitespace doc tokens it came from, and `orig_basic_tokens` their basic
    tokenization (the same normalization). The prediction is located in the basic
    tokenization and carried over character by character (ignoring spaces) to
    `orig_text`; when that cannot be done (e.g. normalization changed the length),
    `orig_text` is returned whole, as the original does.

    >>> get_final_text("steve smith", "Steve Smith's", ["steve", "smith", "'", "s"])
    'Steve Smith'
    >>> get_final_text("x", "(1895).", ["(", "1895", ")", "."])
    '(1895).'
    """
    tok_text = " ".join(orig_basic_tokens)
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_ns_to_s = _strip_spaces(orig_text)
    tok_ns, tok_ns_to_s = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_s_to_ns = {s: ns for ns, s in enumerate(tok_ns_to_s)}
    if start not in tok_s_to_ns or end not in tok_s_to_ns:
        return orig_text
    orig_start = orig_ns_to_s[tok_s_to_ns[start]]
    orig_end = orig_ns_to_s[tok_s_to_ns[end]]
    return orig_text[orig_start:orig_end + 1]


def best_indexes(logits: np.ndarray, n_best_size: int) -> List[int]:
    """Indices of the `n_best_size` largest logits, ties to the lower index.

    >>> best_indexes(np.array([0.1, 3.0, 3.0, -1.0]), 2)
    [1, 2]
    """
    order = np.argsort(-np.asarray(logits, np.float64), kind="stable")
    return [int(i) for i in order[:n_best_size]]


def compute_softmax(scores: Sequence[float]) -> List[float]:
    """Softmax of python floats, shifted by the max for stability.

    >>> [round(p, 4) for p in compute_softmax([1.0, 1.0, 0.0])]
    [0.4223, 0.4223, 0.1554]
    """
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def postprocess_predictions(examples: Sequence[SquadExample], features: Mapping[str, np.ndarray],
                            start_logits: np.ndarray, end_logits: np.ndarray, *,
                            id_to_token: Callable[[int], str], basic_tokenize: BasicFn,
                            n_best_size: int = 20, max_answer_length: int = 30,
                            version_2_with_negative: bool = False,
                            null_score_diff_threshold: float = 0.0) -> List[SquadPrediction]:
    """One SquadPrediction per example from the windows' start/end logits.

    `features` is what `convert_examples_to_features` returned (same order as the
    logits); `id_to_token` maps a WordPiece id to its string; `basic_tokenize` is the
    model's batched basic tokenizer (lower-casing as the model does). A question without
    any window (empty context) gets "" (v2.0) or "empty" (v1.1, the original's filler).
    """
    start_logits = np.asarray(start_logits, np.float32)
    end_logits = np.asarray(end_logits, np.float32)
    by_example = collections.defaultdict(list)
    for feature_index, example_index in enumerate(features["example_index"]):
        by_example[int(example_index)].append(feature_index)
    # The basic tokenization of a doc-token span is the concatenation of its tokens'
    # basic tokenizations (it never joins across whitespace): tokenize each once.
    distinct = sorted({t for i in by_example for t in examples[i].doc_tokens})
    basic_of = dict(zip(distinct, basic_tokenize(distinct))) if distinct else {}

    Prelim = collections.namedtuple("Prelim", "feature_index start end start_logit end_logit")
    predictions = []
    for example_index, example in enumerate(examples):
        prelim = []
        null_score, null_start, null_end, null_feature = None, 0.0, 0.0, None
        for feature_index in by_example.get(example_index, ()):
            starts_row, ends_row = start_logits[feature_index], end_logits[feature_index]
            to_orig = features["token_to_orig_map"][feature_index]
            max_context = features["token_is_max_context"][feature_index]
            if version_2_with_negative:
                score = float(starts_row[0]) + float(ends_row[0])
                if null_score is None or score < null_score:
                    null_score, null_feature = score, feature_index
                    null_start, null_end = float(starts_row[0]), float(ends_row[0])
            for s in best_indexes(starts_row, n_best_size):
                if to_orig[s] < 0 or not max_context[s]:
                    continue
                for e in best_indexes(ends_row, n_best_size):
                    if to_orig[e] < 0 or e < s or e - s + 1 > max_answer_length:
                        continue
                    prelim.append(Prelim(feature_index, s, e, float(starts_row[s]),
                                         float(ends_row[e])))
        if version_2_with_negative and null_feature is not None:
            prelim.append(Prelim(null_feature, 0, 0, null_start, null_end))
        prelim.sort(key=lambda p: p.start_logit + p.end_logit, reverse=True)

        nbest, seen = [], set()
        for p in prelim:
            if len(nbest) >= n_best_size:
                break
            if p.start > 0:
                text = _span_text(example, features, p, id_to_token, basic_of)
                if text in seen:
                    continue
            else:
                text = ""
            seen.add(text)
            nbest.append((text, p.start_logit, p.end_logit))
        if version_2_with_negative and "" not in seen and null_feature is not None:
            nbest.append(("", null_start, null_end))
        if not nbest:
            nbest.append(("", 0.0, 0.0) if version_2_with_negative else ("empty", 0.0, 0.0))

        probabilities = compute_softmax([s + e for _, s, e in nbest])
        nbest_json = [collections.OrderedDict([("text", t), ("probability", p),
                                               ("start_logit", s), ("end_logit", e)])
                      for (t, s, e), p in zip(nbest, probabilities)]
        if not version_2_with_negative:
            predictions.append(SquadPrediction(example.qas_id, nbest[0][0], nbest_json))
            continue
        best_non_null = next((n for n in nbest if n[0]), None)
        if best_non_null is None:
            # No window, or no valid span at all: the null answer is the only answer
            # (the original would fail here); 1e6 ranks it above any threshold.
            diff, text = 1e6, ""
        else:
            diff = null_score - best_non_null[1] - best_non_null[2]
            text = "" if diff > null_score_diff_threshold else best_non_null[0]
        predictions.append(SquadPrediction(example.qas_id, text, nbest_json, diff))
    return predictions


def _span_text(example, features, p, id_to_token, basic_of) -> str:
    """The original-text answer of a candidate span (see get_final_text)."""
    pieces = features["input_word_ids"][p.feature_index][p.start:p.end + 1]
    tok_text = " ".join(id_to_token(int(i)) for i in pieces)
    # De-tokenize WordPiece: "hen ##ry" -> "henry".
    tok_text = tok_text.replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.strip().split())
    to_orig = features["token_to_orig_map"][p.feature_index]
    orig_start, orig_end = int(to_orig[p.start]), int(to_orig[p.end])
    orig_tokens = example.doc_tokens[orig_start:orig_end + 1]
    basic = [b for t in orig_tokens for b in basic_of[t]]
    return get_final_text(tok_text, " ".join(orig_tokens), basic)


def write_prediction_files(predictions: Sequence[SquadPrediction], output_dir: str,
                           version_2_with_negative: bool = False) -> List[str]:
    """predictions.json (qid -> text), nbest_predictions.json (qid -> n-best list) and,
    for v2.0, null_odds.json (qid -> null score - best span score); returns the paths."""
    import tensorflow as tf  # gfile: output dirs may be gs://

    tf.io.gfile.makedirs(output_dir)
    contents = {
        "predictions.json": collections.OrderedDict((p.qas_id, p.text) for p in predictions),
        "nbest_predictions.json": collections.OrderedDict(
            (p.qas_id, p.nbest) for p in predictions),
    }
    if version_2_with_negative:
        contents["null_odds.json"] = collections.OrderedDict(
            (p.qas_id, p.null_score_diff) for p in predictions)
    paths = []
    for name, obj in contents.items():
        path = os.path.join(output_dir, name)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(json.dumps(obj, indent=4) + "\n")
        paths.append(path)
    return paths


def evaluate_predictions(predictions: Sequence[SquadPrediction],
                         examples: Sequence[SquadExample],
                         version_2_with_negative: bool = False) -> Dict[str, float]:
    """eval_results.json for SQuAD: exact_match and f1 (percent) as the official scripts
    compute them; v2.0 adds the HasAns_/NoAns_ splits and best_exact / best_f1 with their
    thresholds (found on these predictions' null odds).

    >>> ex = [SquadExample("a", "?", ["x"], answers=["x"])]
    >>> evaluate_predictions([SquadPrediction("a", "x", [])], ex)
    {'exact_match': 100.0, 'f1': 100.0}
    """
    gold = collections.OrderedDict((ex.qas_id, list(ex.answers)) for ex in examples)
    texts = {p.qas_id: p.text for p in predictions}
    if not version_2_with_negative:
        return squad_metrics.evaluate_v1(gold, texts)
    # exact / f1 score the predictions as written (the threshold is already applied);
    # the null odds only drive the best-threshold search.
    result = squad_metrics.evaluate_v2(gold, texts)
    odds = {p.qas_id: p.null_score_diff for p in predictions}
    has_answer = {qid: bool(golds) for qid, golds in gold.items()}
    exact_raw, f1_raw = squad_metrics.get_raw_scores(gold, texts)
    odds = {qid: odds.get(qid, 0.0) for qid in gold}
    result["best_exact"], result["best_exact_thresh"] = squad_metrics.find_best_threshold(
        texts, exact_raw, odds, has_answer)
    result["best_f1"], result["best_f1_thresh"] = squad_metrics.find_best_threshold(
        texts, f1_raw, odds, has_answer)
    out = {"exact_match": result.pop("exact"), "f1": result.pop("f1")}
    out.update((k, float(v)) for k, v in result.items())
    return out


# ---------------------------------------------------------------------- model
def _keras():
    import keras  # late: reading data and computing metrics need no Keras

    return keras


def _make_head_class():
    keras = _keras()

    @keras.saving.register_keras_serializable(package="bert_tf")
    class SquadHead(keras.layers.Layer):
        """Dense [H, 2] on the sequence output -> start and end logits (float32).

        No dropout before it, as the original. Example:

        >>> import numpy as np
        >>> out = SquadHead(hidden_size=8)({"sequence_output": np.zeros((2, 5, 8), "float32")})
        >>> out["start_logits"].shape, out["end_logits"].shape
        (TensorShape([2, 5]), TensorShape([2, 5]))
        """

        def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
            super().__init__(**kwargs)
            self.hidden_size = hidden_size
            self.initializer_range = initializer_range
            self.dense = keras.layers.Dense(
                2, dtype=self.dtype_policy, name="dense",
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))

        def build(self, input_shape=None):
            self.dense.build((None, None, self.hidden_size))
            self.built = True

        def call(self, encoder_outputs, training=None):
            logits = keras.ops.cast(self.dense(encoder_outputs["sequence_output"]), "float32")
            return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

        def get_config(self):
            config = super().get_config()
            config.update(hidden_size=self.hidden_size,
                          initializer_range=self.initializer_range)
            return config

    return SquadHead


_HEAD_CLASS = None


def squad_head(hidden_size: int, initializer_range: float = 0.02, **kwargs):
    """A built SquadHead (the class is made on first use so this module imports without
    Keras for data work)."""
    global _HEAD_CLASS
    if _HEAD_CLASS is None:
        _HEAD_CLASS = _make_head_class()
    head = _HEAD_CLASS(hidden_size=hidden_size, initializer_range=initializer_range, **kwargs)
    head.build()
    return head


def span_loss(start_positions, end_positions, start_logits, end_logits):
    """Mean of the start and end softmax cross-entropies (over all positions)."""
    from bert_tf.tasks.base import sparse_ce

    return (sparse_ce(start_positions, start_logits) + sparse_ce(end_positions, end_logits)) / 2.0


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


# ---------------------------------------------------------------------- the task
class SquadTask(Task):
    """SQuAD v1.1 (default) or v2.0 (`version_2_with_negative=True`) as a Task.

    Files: `files={"train": train_file, "dev": predict_file, "test": predict_file}` or
    `data_dir` holding train-v1.1.json / dev-v1.1.json (v2.0: train-v2.0.json /
    dev-v2.0.json). Features carry windows (several per example); postprocess merges
    them back into one SquadPrediction per example.
    """

    name = "squad"
    option_names = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                    "version_2_with_negative", "null_score_diff_threshold")
    label_names = ("start_positions", "end_positions")
    primary_metric = "f1"
    # The raw-text serving inputs (bert_tf.export's span signature).
    text_input_names = ("question", "context")

    def __init__(self, tokenizer=None, max_seq_length: int = 384, data_dir=None, files=None,
                 doc_stride: int = 128, max_query_length: int = 64, n_best_size: int = 20,
                 max_answer_length: int = 30, version_2_with_negative: bool = False,
                 null_score_diff_threshold: float = 0.0):
        super().__init__(tokenizer=tokenizer, max_seq_length=max_seq_length,
                         data_dir=data_dir, files=files, doc_stride=int(doc_stride),
                         max_query_length=int(max_query_length), n_best_size=int(n_best_size),
                         max_answer_length=int(max_answer_length),
                         version_2_with_negative=bool(version_2_with_negative),
                         null_score_diff_threshold=float(null_score_diff_threshold))
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.n_best_size = int(n_best_size)
        self.max_answer_length = int(max_answer_length)
        self.version_2_with_negative = bool(version_2_with_negative)
        self.null_score_diff_threshold = float(null_score_diff_threshold)

    # ------------------------------------------------------------------ data
    def default_file(self, split: str) -> str:
        version = "v2.0" if self.version_2_with_negative else "v1.1"
        return f"{'train' if split == 'train' else 'dev'}-{version}.json"

    def get_examples(self, split: str) -> List[SquadExample]:
        path = self.split_file(split)
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            raise TaskDataError(f"{path}: no such file; pass --train_file / --predict_file "
                                f"(official SQuAD json) or a --data_dir holding "
                                f"{self.default_file(split)}")
        return read_squad_examples(path, is_training=(split == "train"),
                                   version_2_with_negative=self.version_2_with_negative)

    def _require_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError("squad: this step needs a tokenizer (pass a BertTokenizer)")
        return self.tokenizer

    def convert_examples(self, examples: Sequence[SquadExample], split: str) -> Dict[str, np.ndarray]:
        tokenizer = self._require_tokenizer()
        return convert_examples_to_features(
            examples, tokenizer_ids_fn(tokenizer), int(tokenizer.cls_id), int(tokenizer.sep_id),
            max_seq_length=self.max_seq_length, doc_stride=self.doc_stride,
            max_query_length=self.max_query_length, is_training=(split == "train"))

    def feature_spec(self):
        spec = {k: ([self.max_seq_length], "int64") for k in self.model_input_names}
        spec.update({k: ([], "int64") for k in self.label_names})
        return spec

    # ------------------------------------------------------------------ model
    def build_head(self, config):
        return squad_head(config.hidden_size, config.initializer_range, name="task_head")

    def loss(self, features, outputs):
        return span_loss(features["start_positions"], features["end_positions"],
                         outputs["start_logits"], outputs["end_logits"])

    # ------------------------------------------------------------------ results
    def postprocess(self, outputs, features, examples) -> List[SquadPrediction]:
        tokenizer = self._require_tokenizer()
        return postprocess_predictions(
            examples, features, np.asarray(outputs["start_logits"]),
            np.asarray(outputs["end_logits"]), id_to_token=tokenizer_id_to_token(tokenizer),
            basic_tokenize=tokenizer_basic_fn(tokenizer), n_best_size=self.n_best_size,
            max_answer_length=self.max_answer_length,
            version_2_with_negative=self.version_2_with_negative,
            null_score_diff_threshold=self.null_score_diff_threshold)

    def evaluate(self, predictions, examples) -> Dict[str, float]:
        return evaluate_predictions(predictions, examples, self.version_2_with_negative)

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        return write_prediction_files(predictions, output_dir, self.version_2_with_negative)
