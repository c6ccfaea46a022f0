"""SQuAD serving: the raw-text signature's windows, max-context rule and n-best span
search (squad_postprocess.SpanServing) pick the answers the host postprocessing picks."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.tasks import make_task
from bert_tf.tasks.squad_data import examples_from_json
from tests.helpers.squad import VOCAB
from tests.helpers.tasks import tiny_task_model

WORDS = [w for w in VOCAB if not w.startswith(("[", "##"))]


def articles(count, seed=0):
    """Contexts of 12-40 vocab words (several windows each) and 1-6 word questions."""
    rng = np.random.default_rng(seed)
    paragraphs = []
    for i in range(count):
        context = " ".join(rng.choice(WORDS, rng.integers(12, 40)))
        question = " ".join(rng.choice(WORDS, rng.integers(1, 7)))
        paragraphs.append({"context": context, "qas": [{"id": f"q{i}", "question": question,
                                                       "answers": []}]})
    return [{"title": "t", "paragraphs": paragraphs}]


@pytest.mark.parametrize("version_2,seed", [(False, 0), (True, 0), (False, 4)])
def test_serving_answers_equal_host_postprocess(squad_tokenizer, version_2, seed):
    task = make_task("squad", tokenizer=squad_tokenizer, max_seq_length=20, doc_stride=4,
                     max_query_length=5, n_best_size=4, max_answer_length=4,
                     version_2_with_negative=version_2)
    data = articles(16, seed)
    examples = examples_from_json(data, is_training=False)
    model = tiny_task_model(task, len(VOCAB), seed=seed, scale=3.0)
    features = task.convert_examples(examples, "dev")
    assert len(features["example_index"]) > len(examples)  # contexts span windows
    outputs = model({k: features[k] for k in task.model_input_names})
    if version_2:  # a threshold between the questions' null odds: some get ""
        task.null_score_diff_threshold = float(np.median(
            [p.null_score_diff for p in task.postprocess(outputs, features, examples)]))
    want = task.postprocess(outputs, features, examples)

    module = task.serving_module(model, squad_tokenizer, 20)
    paragraphs = data[0]["paragraphs"]
    got = module.serve_text(tf.constant([p["qas"][0]["question"] for p in paragraphs]),
                            tf.constant([p["context"] for p in paragraphs]))
    answers = [a.decode() for a in got["answer_text"].numpy()]
    # No valid span: the host writes the original's filler "empty", serving "" (score 0).
    assert answers == ["" if p.text == "empty" else p.text for p in want]
    if not version_2:
        assert "" in answers  # padded positions among the n best crowd out every span
    if version_2:
        assert "" in answers and set(answers) != {""}
    for row, p in enumerate(want):
        best = p.nbest[0]
        if best["text"]:
            np.testing.assert_allclose(got["score"][row], best["start_logit"] + best["end_logit"],
                                       atol=1e-4)
        context = paragraphs[row]["context"]
        s, e = int(got["start_char"][row]), int(got["end_char"][row])
        assert (context[s:e] if s >= 0 else "") == answers[row]
