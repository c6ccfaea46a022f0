"""SQuAD answers from start/end logits: the host postprocessing (the original run_squad's)
and the same search in the graph for the raw-text serving signature (`SpanServing`).

* Host (`postprocess_predictions`): the `n_best_size` best starts and ends of every
  window form candidate spans (inside the document part, end >= start, at most
  `max_answer_length` sub-tokens, start in its max-context window); the best ones over
  all windows of a question are mapped back to the original context text
  (`get_final_text`). v2.0: the null score is the smallest [CLS] start+end logit over the
  windows; the answer is "" when `null score - best span score > null_score_diff_threshold`.
* Files as the original writes them: predictions.json, nbest_predictions.json and, for
  v2.0, null_odds.json; eval_results.json holds exact_match and f1 (official scripts).
* Serving (`SpanServing`): the same windows, max-context rule, n-best search and null
  threshold on tensors; tests/test_tasks_squad_serving.py checks it picks the span the
  host picks.

>>> compute_softmax([1.0, 1.0])
[0.5, 0.5]
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.core import output_guard
from bert_tf.serving import modules as serving
from bert_tf.tasks import squad_metrics
from bert_tf.tasks.squad_data import BasicFn, SquadExample
from bert_tf.text.packing import pack_inputs


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
        output_guard.write_text(path, json.dumps(obj, indent=4) + "\n")
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


# ---------------------------------------------------------------------- serving
class SpanServing(serving.TaskServing):
    """SQuAD: `question`, `context` -> the best answer span, as `postprocess_predictions`.

    Outputs: `answer_text` [b] (a substring of the context; "" for no answer),
    `start_char` / `end_char` [b] code point offsets into the context (end exclusive, -1
    when no answer), `score` [b] (start + end logit of the best span), `null_score` [b]
    (the [CLS] score, min over windows; v2.0 answers "" when null_score - score exceeds
    the threshold). Contexts longer than a window are cut into windows with `doc_stride`
    and each token counts only in the window where it has the most context (the
    original's rule). The ids signature returns `start_logits`, `end_logits`.
    """

    text_inputs = ("question", "context")

    def __init__(self, model, tokenizer, max_seq_length, *, doc_stride, max_query_length,
                 n_best_size, max_answer_length, version_2_with_negative=False,
                 null_score_diff_threshold=0.0, text_signatures=True):
        super().__init__(model, tokenizer, max_seq_length, name="bert_squad_serving",
                         text_signatures=text_signatures)
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.n_best_size = int(n_best_size)
        self.max_answer_length = int(max_answer_length)
        self.version_2 = bool(version_2_with_negative)
        self.threshold = float(null_score_diff_threshold)

    def from_ids(self, inputs):
        out = self._model(inputs)
        return {"start_logits": tf.cast(out["start_logits"], tf.float32),
                "end_logits": tf.cast(out["end_logits"], tf.float32)}

    def warmup_texts(self):
        return {"question": np.array([b"What jumps over the dog?", b"Where is Seoul?"],
                                     dtype=object),
                "context": np.array([serving.WARMUP_TEXTS[0].encode(), serving.WARMUP_TEXTS_B[2].encode()],
                                    dtype=object)}

    def encode(self, question, context):
        return self._windows(question, context)[0]

    def _windows(self, question, context):
        """Packed windows and the bookkeeping to map them back to the context."""
        q = self.tok.tokenize(question)
        q = q[:, :self.max_query_length]  # as the original: the question's first pieces
        ids, starts, ends = self.tok.tokenize_with_offsets(context)
        n = ids.row_lengths()
        q_len = q.row_lengths()
        room = tf.maximum(self.max_seq_length - q_len - 3, 1)     # context tokens per window
        step = tf.minimum(room, self.doc_stride)
        count = tf.where(n <= room, tf.ones_like(n), (n - room + step - 1) // step + 1)
        window_row = tf.repeat(tf.range(ids.nrows()), count)
        local_start = tf.ragged.range(count).flat_values * tf.gather(step, window_row)
        length = tf.minimum(tf.gather(room, window_row), tf.gather(n, window_row) - local_start)
        length = tf.maximum(length, 0)
        global_start = tf.gather(ids.row_starts(), window_row) + local_start
        index = tf.ragged.range(global_start, global_start + length)
        context_windows = tf.gather(ids.flat_values, index)
        inputs = pack_inputs(tf.gather(q, window_row), context_windows, self.max_seq_length,
                             self.tok.cls_id, self.tok.sep_id)
        # Windows stay max_seq_length long, as the host's features: the original's n-best
        # search ranks the logits of every position, padding included.
        return ({k: tf.cast(v, tf.int32) for k, v in inputs.items()}, window_row, index,
                tf.gather(q_len, window_row),
                local_start, length, starts, ends)

    def from_text(self, question, context):
        (inputs, window_row, index, q_len, local_start, length, starts,
         ends) = self._windows(question, context)
        logits = self.from_ids(inputs)
        start_logits, end_logits = logits["start_logits"], logits["end_logits"]
        seq = tf.shape(start_logits)[1]
        num_windows = tf.shape(start_logits)[0]
        # Max-context rule: score = min(left, right context) + 0.01 * window length; each
        # context token counts only in its best window (the first one on ties).
        token = index.flat_values                                  # global context token
        token_window = tf.cast(index.value_rowids(), tf.int32)
        pos_in_window = tf.ragged.range(length).flat_values
        win_len = tf.gather(length, token_window)
        score = (tf.cast(tf.minimum(pos_in_window, win_len - 1 - pos_in_window), tf.float32)
                 + 0.01 * tf.cast(win_len, tf.float32))
        total = tf.size(starts.flat_values)
        best = tf.math.unsorted_segment_max(score, token, total)
        first_best = tf.math.unsorted_segment_min(
            tf.where(score >= tf.gather(best, token), token_window, np.iinfo(np.int32).max),
            token, total)
        max_context = tf.equal(tf.gather(first_best, token), token_window)
        # Per window: which positions may start / end an answer.
        position = tf.cast(tf.gather(q_len, token_window) + 2 + pos_in_window, tf.int32)
        scatter_at = tf.stack([token_window, position], axis=1)
        shape = tf.stack([num_windows, seq])
        can_end = tf.scatter_nd(scatter_at, tf.ones_like(position, tf.bool), shape)
        can_start = tf.scatter_nd(scatter_at, max_context, shape)
        k = tf.minimum(self.n_best_size, seq)
        neg = tf.constant(-1e30, tf.float32)
        # The original searches only the n_best_size highest start and end logits.
        can_start &= start_logits >= tf.math.top_k(start_logits, k).values[:, -1:]
        can_end &= end_logits >= tf.math.top_k(end_logits, k).values[:, -1:]
        i = tf.range(seq)[:, None]
        j = tf.range(seq)[None, :]
        band = (j >= i) & (j - i < self.max_answer_length)
        valid = band[None] & can_start[:, :, None] & can_end[:, None, :]
        pair = tf.where(valid, start_logits[:, :, None] + end_logits[:, None, :], neg)
        flat = tf.reshape(pair, [num_windows, -1])
        best_pair = tf.argmax(flat, axis=1, output_type=tf.int32)
        best_score = tf.reduce_max(flat, axis=1)
        null = start_logits[:, 0] + end_logits[:, 0]
        # Per example: the best window, and the smallest null score over windows.
        nrows = tf.cast(starts.nrows(), tf.int32)
        row = tf.cast(window_row, tf.int32)
        example_best = tf.math.unsorted_segment_max(best_score, row, nrows)
        example_null = tf.math.unsorted_segment_min(null, row, nrows)
        window_ids = tf.range(num_windows)
        chosen = tf.math.unsorted_segment_min(
            tf.where(best_score >= tf.gather(example_best, row), window_ids,
                     np.iinfo(np.int32).max), row, nrows)
        chosen = tf.minimum(chosen, num_windows - 1)
        pair_of = tf.gather(best_pair, chosen)
        start_pos, end_pos = pair_of // seq, pair_of % seq
        offset = tf.cast(tf.gather(q_len, chosen), tf.int32) + 2
        first_token = (tf.cast(tf.gather(starts.row_starts(), tf.gather(window_row, chosen)),
                               tf.int32)
                       + tf.cast(tf.gather(local_start, chosen), tf.int32))
        start_token = tf.maximum(first_token + start_pos - offset, 0)
        end_token = tf.maximum(first_token + end_pos - offset, 0)
        flat_start, flat_end = starts.flat_values, ends.flat_values
        safe = tf.maximum(tf.size(flat_start) - 1, 0)
        has_span = example_best > neg / 2
        if self.version_2:
            has_span &= ~(example_null - example_best > self.threshold)
        start_byte = tf.where(has_span, tf.gather(
            tf.concat([flat_start, [0]], 0), tf.minimum(start_token, safe)), 0)
        end_byte = tf.where(has_span, tf.gather(
            tf.concat([flat_end, [0]], 0), tf.minimum(end_token, safe)), 0)
        answer = tf.strings.substr(context, start_byte, end_byte - start_byte)
        start_char = serving.bytes_to_chars(context, start_byte[:, None])[:, 0]
        end_char = serving.bytes_to_chars(context, end_byte[:, None])[:, 0]
        return {"answer_text": tf.where(has_span, answer, ""),
                "start_char": tf.where(has_span, start_char, -1),
                "end_char": tf.where(has_span, end_char, -1),
                "score": tf.where(example_best > neg / 2, example_best, 0.0),
                "null_score": example_null}
