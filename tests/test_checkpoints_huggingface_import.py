"""Hugging Face task models in: a fine-tuned BertFor* directory converts to a fine-tuned
bert_tf model dir (encoder + task head + task_config.json) that `export_model` serves on
raw text, giving what transformers' `pipeline` gives on the same sentences.

The HF models are small random BERTs with MiniLM's real vocab and uncased tokenizer,
trained a few steps in the test: sentence classification (labels from id2label, the task named by
--task_name or by config.json's finetuning_task), regression, NER (word tags from the
first sub-token: the pipeline's aggregation_strategy="first"), question answering (transformers 5
has no question-answering pipeline: run_qa's windows and post-processing on the HF model)
and multiple choice (no pipeline: BertForMultipleChoice's own softmax).
"""

import json

import numpy as np
import pytest
import tensorflow as tf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tensorflow_text  # noqa: E402,F401  (the raw-text signature's ops)

from bert_tf.convert_checkpoint import convert  # noqa: E402
from bert_tf.core.errors import UsageError  # noqa: E402
from bert_tf.export.saved_model import SERVING_DEFAULT, export_model_dir  # noqa: E402
from bert_tf.model import model_dir  # noqa: E402

SENTENCES = ["What a wonderful, warm film!", "The plot was dull and far too long.",
             "It is a movie.", "Héllo wörld: naïve café, 3.14 and U.S. prices don't move."]


def _hf_model(cls, minilm_dir, directory, batches, steps=6, **config):
    """A small random BERT (2 layers, hidden 32) with MiniLM's vocab under a `cls` head,
    trained `steps` steps on `batches` (a function: model -> loss), saved with MiniLM's
    fast uncased tokenizer (transformers 5 writes tokenizer.json, no vocab.txt)."""
    torch.manual_seed(0)
    model = cls(transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, **config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        batches(model).backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(str(directory))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    tokenizer.save_pretrained(str(directory))
    return model, tokenizer


def _serve(hf_dir, tmp_path, **convert_args):
    """convert_checkpoint + export_model; the loaded raw-text signature."""
    ours = tmp_path / "ours"
    convert("huggingface", str(hf_dir), str(ours), **convert_args)
    path = export_model_dir(model_dir.resolve(str(ours)), str(tmp_path / "export"))
    return ours, tf.saved_model.load(path).signatures[SERVING_DEFAULT]


def _strings(values):
    return [v.decode() for v in np.asarray(values).ravel()]


# --------------------------------------------------------------------------- classification
def test_classifier_labels_and_probabilities_equal_the_pipeline(minilm_dir, tmp_path):
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    target = torch.tensor([2, 0, 1, 1])
    hf_dir = tmp_path / "hf"
    model, tokenizer = _hf_model(
        transformers.BertForSequenceClassification, minilm_dir, hf_dir,
        lambda m: m(**batch, labels=target).loss, num_labels=3, id2label=labels,
        label2id={v: k for k, v in labels.items()})
    # Three labels and no finetuning_task: which task's inputs (one text or a pair)? A
    # UsageError: the command prints its one line.
    with pytest.raises(UsageError, match="pass --task_name"):
        convert("huggingface", str(hf_dir), str(tmp_path / "refused"))
    with pytest.raises(UsageError, match="does not fit"):
        convert("huggingface", str(hf_dir), str(tmp_path / "x"), task_name="squad")

    ours, serve = _serve(hf_dir, tmp_path, task_name="sst-2")
    task = model_dir.read_task_config(str(ours))
    assert task["task_name"] == "SST-2" and task["label_list"] == list(labels.values())
    # from tokenizer_config.json
    assert model_dir.read_tokenizer_config(str(ours))["do_lower_case"] is True

    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                 top_k=None)
    got = serve(text=tf.constant(SENTENCES))
    for i, want in enumerate(pipe(SENTENCES)):
        best = max(want, key=lambda r: r["score"])
        assert _strings(got["label"])[i] == best["label"]
        probabilities = {r["label"]: r["score"] for r in want}
        np.testing.assert_allclose(got["probabilities"].numpy()[i],
                                   [probabilities[name] for name in labels.values()],
                                   atol=1e-4)


def test_pair_classifier_named_by_its_finetuning_task(minilm_dir, tmp_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    a, b = SENTENCES[:2], ["A fine film.", "Boring."]
    batch = tokenizer(a, b, padding=True, return_tensors="pt")
    hf_dir = tmp_path / "mrpc"
    model, tokenizer = _hf_model(
        transformers.BertForSequenceClassification, minilm_dir, hf_dir,
        lambda m: m(**batch, labels=torch.tensor([1, 0])).loss, steps=3, num_labels=2)
    # What transformers' run_glue records (transformers 5 no longer has the field).
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps(dict(config, finetuning_task="mrpc")))
    ours, serve = _serve(hf_dir, tmp_path)  # no --task_name: config.json says MRPC
    assert model_dir.read_task_config(str(ours))["task_name"] == "MRPC"
    got = serve(text=tf.constant(a), text_b=tf.constant(b))
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                 top_k=None)
    for i, want in enumerate(pipe([{"text": x, "text_pair": y} for x, y in zip(a, b)])):
        scores = {r["label"]: r["score"] for r in want}
        np.testing.assert_allclose(got["probabilities"].numpy()[i],
                                   [scores["LABEL_0"], scores["LABEL_1"]], atol=1e-4)
        assert _strings(got["label"])[i] == max(want, key=lambda r: r["score"])["label"]



def test_regressor_scores_equal_the_pipeline(minilm_dir, tmp_path):
    """One output and problem_type=regression: STS-B's pair regressor, no flag needed."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    a, b = SENTENCES[:2], ["A fine film.", "Boring."]
    batch = tokenizer(a, b, padding=True, return_tensors="pt")
    hf_dir = tmp_path / "stsb"
    model, tokenizer = _hf_model(
        transformers.BertForSequenceClassification, minilm_dir, hf_dir,
        lambda m: m(**batch, labels=torch.tensor([4.0, 1.0])).loss, steps=3, num_labels=1,
        problem_type="regression")
    ours, serve = _serve(hf_dir, tmp_path)
    task = model_dir.read_task_config(str(ours))
    assert task["task_name"] == "STS-B" and task["label_list"] is None
    got = serve(text=tf.constant(a), text_b=tf.constant(b))
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer)
    want = [r["score"] for r in pipe([{"text": x, "text_pair": y} for x, y in zip(a, b)])]
    np.testing.assert_allclose(got["score"].numpy(), want, atol=1e-4)
    # and back out: transformers reads the task from finetuning_task
    back = tmp_path / "back"
    convert("bert_tf", str(ours), str(back), target_format="huggingface")
    assert json.loads((back / "config.json").read_text())["finetuning_task"] == "STS-B"


# --------------------------------------------------------------------------- NER
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
NER_TEXTS = ["John Smith lives in New York .", "Mary went to Paris yesterday .",
             "Angela Merkel visited Washington and Berlin .", "Nothing here ."]


def _entity_groups(words, tags, starts, ends):
    """transformers' group_entities over our per-word tags: a word whose tag is I- of the
    previous word's entity type continues it; O groups are dropped."""
    groups = []
    for word, tag, start, end in zip(words, tags, starts, ends):
        bi, kind = (tag[0], tag[2:]) if tag[:2] in ("B-", "I-") else ("I", tag)
        if groups and groups[-1]["kind"] == kind and bi != "B":
            groups[-1]["end"] = end
        else:
            groups.append({"kind": kind, "start": start, "end": end})
    return [(g["kind"], g["start"], g["end"]) for g in groups if g["kind"] != "O"]


def test_ner_tags_equal_the_token_classification_pipeline(minilm_dir, tmp_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    gold = [["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"],
            ["B-PER", "O", "O", "B-LOC", "O", "O"],
            ["B-PER", "I-PER", "O", "B-LOC", "O", "B-LOC", "O"], ["O", "O", "O"]]
    words = [t.split() for t in NER_TEXTS]
    encoded = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    labels = torch.full(encoded["input_ids"].shape, -100)
    for row in range(len(words)):
        previous = None
        for position, word in enumerate(encoded.word_ids(row)):
            if word is not None and word != previous:
                labels[row, position] = NER_LABELS.index(gold[row][word])
            previous = word
    hf_dir = tmp_path / "hf"
    model, tokenizer = _hf_model(
        transformers.BertForTokenClassification, minilm_dir, hf_dir,
        lambda m: m(**encoded, labels=labels).loss, steps=15,
        num_labels=len(NER_LABELS), id2label=dict(enumerate(NER_LABELS)))
    ours, serve = _serve(hf_dir, tmp_path)  # the architecture says: a tagger
    task = model_dir.read_task_config(str(ours))
    assert task["task_name"] == "conll2003" and task["label_list"] == NER_LABELS

    # CoNLL-style text: our words are whitespace-separated (as CoNLL's), the pipeline's
    # split punctuation off too ("Berlin," is one word here, two there).
    texts = NER_TEXTS + ["Mary Smith and John live in Berlin , New York ."]
    got = serve(text=tf.constant(texts))
    pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                 aggregation_strategy="first")
    found = 0
    for i, want in enumerate(pipe(texts)):
        n = int(got["num_words"][i])
        ours_groups = _entity_groups(
            _strings(got["words"][i][:n]), _strings(got["tags"][i][:n]),
            got["start_char"].numpy()[i][:n].tolist(), got["end_char"].numpy()[i][:n].tolist())
        assert ours_groups == [(g["entity_group"], g["start"], g["end"]) for g in want], i
        found += len(want)
    assert found >= 3  # the tagger found entities: the comparison is not of empty lists


# --------------------------------------------------------------------------- QA
QA = [("Who wrote the letter?", "The letter was written by Anna Karenina in Moscow.",
       "Anna Karenina"),
      ("Where is the tower?", "The old tower stands in Paris, near the river.", "Paris"),
      ("When did the war end?", "The war ended in 1945 after six years of fighting.", "1945")]


def test_qa_answers_equal_transformers_run_qa_postprocessing(minilm_dir, tmp_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    questions, contexts, answers = zip(*QA)
    encoded = tokenizer(list(questions), list(contexts), padding=True,
                        return_offsets_mapping=True, return_tensors="pt")
    starts, ends = [], []
    for row, (context, answer) in enumerate(zip(contexts, answers)):
        first, last = context.index(answer), context.index(answer) + len(answer)
        sequence = encoded.sequence_ids(row)
        offsets = encoded["offset_mapping"][row].tolist()
        spans = [p for p, (s, e) in enumerate(offsets)
                 if sequence[p] == 1 and s >= first and e <= last]
        starts.append(spans[0])
        ends.append(spans[-1])
    inputs = {k: v for k, v in encoded.items() if k != "offset_mapping"}
    hf_dir = tmp_path / "hf"
    model, tokenizer = _hf_model(
        transformers.BertForQuestionAnswering, minilm_dir, hf_dir,
        lambda m: m(**inputs, start_positions=torch.tensor(starts),
                    end_positions=torch.tensor(ends)).loss, steps=20)
    ours, serve = _serve(hf_dir, tmp_path)
    assert model_dir.read_task_config(str(ours))["task_name"] == "squad"

    got = serve(question=tf.constant(questions), context=tf.constant(contexts))
    want = _run_qa_answers(model, tokenizer, questions, contexts)
    assert _strings(got["answer_text"]) == [w[0] for w in want]
    assert got["start_char"].numpy().tolist() == [w[1] for w in want]
    assert got["end_char"].numpy().tolist() == [w[2] for w in want]
    np.testing.assert_allclose(got["score"].numpy(), [w[3] for w in want], atol=1e-4)
    assert sum(w[0] == a for w, a in zip(want, answers)) >= 2  # it learned
    # a SQuAD 2.0 model: --task_name=squad_v2 serves "no answer" when [CLS] wins
    convert("huggingface", str(hf_dir), str(tmp_path / "v2"), task_name="squad_v2")
    task = model_dir.read_task_config(str(tmp_path / "v2"))
    assert task["task_name"] == "squad" and task["version_2_with_negative"] is True
    assert task["max_seq_length"] == 384 and task["doc_stride"] == 128


def _run_qa_answers(model, tokenizer, questions, contexts, n_best=20, max_answer=30):
    """transformers' question answering on raw text (its pipeline is gone in transformers
    5): run_qa's windows (fast-tokenizer offsets, `stride`) and post-processing (the
    n_best start and end logits, spans inside the context, best start + end logit) ->
    (answer, start_char, end_char, score) per question."""
    encoded = tokenizer(list(questions), list(contexts), truncation="only_second",
                        max_length=384, stride=128, return_overflowing_tokens=True,
                        return_offsets_mapping=True, padding=True, return_tensors="pt")
    rows = encoded.pop("overflow_to_sample_mapping").tolist()
    offsets = encoded.pop("offset_mapping").tolist()
    with torch.no_grad():
        out = model(**encoded)
    best = {}
    for window, row in enumerate(rows):
        sequence = encoded.sequence_ids(window)
        start, end = out.start_logits[window].numpy(), out.end_logits[window].numpy()
        for s in np.argsort(start)[::-1][:n_best]:
            for e in np.argsort(end)[::-1][:n_best]:
                if sequence[s] != 1 or sequence[e] != 1 or e < s or e - s + 1 > max_answer:
                    continue
                score = float(start[s] + end[e])
                if row not in best or score > best[row][0]:
                    best[row] = (score, offsets[window][s][0], offsets[window][e][1])
    return [(contexts[row][b[1]:b[2]], b[1], b[2], b[0]) for row, b in sorted(best.items())]


# --------------------------------------------------------------------------- multiple choice
def test_multiple_choice_probabilities_equal_bert_for_multiple_choice(minilm_dir, tmp_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    context = ["She opened the umbrella", "He put the kettle on"]
    endings = [["because it rained.", "and ate a car.", "to fly home.", "while asleep."],
               ["to make tea.", "and swam away.", "because it rained.", "to paint it."]]
    flat = tokenizer([c for c in context for _ in range(4)], sum(endings, []),
                     padding=True, return_tensors="pt")
    batch = {k: v.view(2, 4, -1) for k, v in flat.items()}
    hf_dir = tmp_path / "hf"
    model, _ = _hf_model(transformers.BertForMultipleChoice, minilm_dir, hf_dir,
                         lambda m: m(**batch, labels=torch.tensor([0, 0])).loss, steps=3)
    ours, serve = _serve(hf_dir, tmp_path)
    assert model_dir.read_task_config(str(ours))["task_name"] == "swag"
    got = serve(text=tf.constant(context), endings=tf.constant(endings))
    with torch.no_grad():
        want = torch.softmax(model(**batch).logits, -1).numpy()
    np.testing.assert_allclose(got["probabilities"].numpy(), want, atol=1e-4)


def test_task_name_on_a_model_without_a_head_is_refused(minilm_dir, tmp_path):
    from bert_tf.checkpoints.weights import CheckpointFormatError

    with pytest.raises(CheckpointFormatError, match="no task head"):
        convert("huggingface", str(minilm_dir), str(tmp_path / "out"), task_name="sst-2")
    with pytest.raises(UsageError, match="--task_name applies to"):
        convert("tf1", str(tmp_path / "no_such_ckpt"), str(tmp_path / "out"), task_name="sst-2")
    with pytest.raises(UsageError, match="unknown task 'sst-7'"):
        convert("huggingface", str(minilm_dir), str(tmp_path / "out"), task_name="sst-7")
