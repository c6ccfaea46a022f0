"""Length-bucketed fine-tuning batches (bert_tf/data/finetuning.py) and the Trainer on them."""

import numpy as np
import tensorflow as tf

from bert_tf.data import finetuning as data_lib
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks.ner import Conll2003NerTask
from bert_tf.training import optimization
from bert_tf.training.loop import Trainer
from tests.helpers import loop_options

SEQ = 16
CFG = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=SEQ,
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _features(n=40, seed=0):
    """NER-like rows: inputs [n, SEQ] of random lengths, per-token labels (-1 = padding)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, SEQ + 1, n)
    mask = (np.arange(SEQ)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, CFG.vocab_size, (n, SEQ)).astype(np.int32) * mask
    labels = np.where(mask > 0, rng.integers(0, 9, (n, SEQ)), -1).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids),
            "label_ids": labels}


def test_batches_hold_rows_of_one_bucket_trimmed_with_their_per_token_labels():
    features = _features()
    dataset = data_lib.array_dataset(features, ["label_ids"], 4, True, seed=1,
                                     length_buckets=(4, 8, 12))
    assert dataset.element_spec[0]["input_word_ids"].shape.as_list() == [4, None]
    rows = {tuple(r): i for i, r in enumerate(features["input_word_ids"].tolist())}
    seen, widths = set(), set()
    for x, y in dataset.take(40):
        width = x["input_word_ids"].shape[1]
        widths.add(width)
        lengths = x["input_mask"].numpy().sum(1)
        # Each row is in the shortest bucket that holds it.
        shorter = max([0] + [b for b in (4, 8, 12, 16) if b < width])
        assert all(shorter < n <= width for n in lengths), (width, lengths)
        assert y["label_ids"].shape == x["input_word_ids"].shape
        for ids, labels in zip(x["input_word_ids"].numpy(), y["label_ids"].numpy()):
            padded = tuple(ids.tolist() + [0] * (SEQ - width))
            i = rows[padded]  # the trimmed row is a prefix of an original row ...
            seen.add(i)
            np.testing.assert_array_equal(labels, features["label_ids"][i, :width])
    assert widths == {4, 8, 12, 16}
    assert len(seen) == 40  # ... and every row is drawn


def test_padding_to_the_bucket_leaves_each_rows_outputs_unchanged():
    task = Conll2003NerTask(tokenizer=None, max_seq_length=SEQ)
    model = task.build_model(BertEncoder(CFG))
    features = _features(8, seed=3)
    full = model({k: features[k] for k in data_lib.MODEL_INPUTS})["logits"].numpy()
    lengths = features["input_mask"].sum(1)
    width = int(lengths.max())
    cut = model({k: features[k][:, :width] for k in data_lib.MODEL_INPUTS})["logits"].numpy()
    for row, n in enumerate(lengths):
        np.testing.assert_allclose(cut[row, :n], full[row, :n], atol=1e-5)


def test_trainer_runs_bucketed_batches_with_one_trace_and_predicts_in_order(tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    task = Conll2003NerTask(tokenizer=None, max_seq_length=SEQ)
    with strategy.scope():
        model = task.build_model(BertEncoder(CFG))
        optimizer = optimization.create_optimizer(1e-3, 12, 2)
    trainer = Trainer(model, task.loss, optimizer, strategy, output_dir=str(tmp_path),
                      checkpoint_items=model.checkpoint_items(),
                      options=loop_options(strategy, steps_per_loop=6, write_summaries=False))
    features = _features()
    result = trainer.train(
        lambda ctx: data_lib.array_dataset(features, ["label_ids"], 4, True, ctx, seed=2,
                                           length_buckets=data_lib.batch_bucket_lengths(SEQ)),
        global_batch_size=4, num_steps=12)
    assert result["step"] == 12 and np.isfinite(result["loss"])
    assert trainer.train_loop_traces == 1
    outputs = trainer.predict(features, batch_size=6)["logits"]
    assert outputs.shape == (40, SEQ, len(task.label_list))
    direct = model({k: features[k] for k in data_lib.MODEL_INPUTS})["logits"].numpy()
    np.testing.assert_allclose(outputs, direct, atol=1e-5)
    # Bucketed prediction: the same per-token outputs inside each row's length, in the
    # original row order; beyond the bucket, a value that never wins an argmax.
    bucketed = trainer.predict(features, batch_size=6, length_buckets=(4, 8, 12))["logits"]
    assert bucketed.shape == outputs.shape
    for row, n in enumerate(features["input_mask"].sum(1)):
        np.testing.assert_allclose(bucketed[row, :n], direct[row, :n], atol=1e-5)
        width = min(b for b in (4, 8, 12, SEQ) if b >= n)
        assert (bucketed[row, width:] == -10000.0).all()
    # One trace of the prediction step served every length (none per bucket).
    [(_, _, step)] = trainer.inference._steps
    assert step.experimental_get_tracing_count() == 1


def test_buckets_are_finer_when_the_step_is_not_compiled(tmp_path):
    """TF's kernels take any length at no cost: multiples of 8 (less padding); XLA
    compiles once per length: at most 8 coarser ones; TPUs and --nolength_bucketing: none."""
    from bert_tf import finetune
    from bert_tf.app import setting_fields

    def config(*extra):
        return finetune.FinetuneConfig.from_flags(setting_fields.parse_args(
            finetune.define_flags, ["--task_name=SST-2", f"--output_dir={tmp_path}",
                                    "--max_seq_length=64", *extra]))

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert config().length_buckets(strategy, jit_compile=False) == tuple(range(8, 65, 8))
    assert config().length_buckets(strategy, jit_compile=True) == (16, 32, 48, 64)
    assert config("--nolength_bucketing").length_buckets(strategy, jit_compile=False) is None
    assert data_lib.batch_bucket_lengths(128, compiled=False) == tuple(range(8, 129, 8))
    assert data_lib.batch_bucket_lengths(384, compiled=False) == tuple(range(24, 385, 24))
    # Rows of 3..8 tokens all go to the 8-wide bucket: half the compiled bucket's width.
    features = _features(n=32, seed=4)
    short = features["input_mask"].sum(1) <= 8
    widths = {x["input_mask"].shape[1] for x, _ in data_lib.array_dataset(
        {k: v[short] for k, v in features.items()}, ["label_ids"], 4, True, seed=1,
        length_buckets=data_lib.batch_bucket_lengths(SEQ, compiled=False)).take(6)}
    assert widths == {8}


def _squad_slice(shared_data, tmp_path, questions):
    """The first whole articles of the shared train-v1.1 up to `questions` questions,
    written as a train file; returns its path."""
    import json

    with open(shared_data / "squad" / "train-v1.1.first44.json") as f:
        articles = json.load(f)["data"]
    taken, n = [], 0
    for article in articles:
        if n >= questions:
            break
        taken.append(article)
        n += sum(len(p["qas"]) for p in article["paragraphs"])
    path = tmp_path / "train-v1.1.json"
    path.write_text(json.dumps({"version": "1.1", "data": taken}))
    return path


def test_squad_training_batches_are_random_windows_cut_to_their_bucket(shared_data,
                                                                       minilm_dir, tmp_path):
    """finetune's SQuAD training stream with length buckets on (the default): a
    paragraph's questions have windows of about one length, so batches grouped by length
    held a few paragraphs (7x the same-paragraph pairs of random batches on this slice);
    they must be random batches (each window once per epoch) cut to the bucket of their
    longest row."""
    import collections
    import types

    from bert_tf import finetune
    from bert_tf.data.position import InputPosition
    from bert_tf.tasks.squad import SquadTask
    from bert_tf.text.tokenization import BertTokenizer

    task = SquadTask(tokenizer=BertTokenizer(str(minilm_dir / "vocab.txt"), do_lower_case=True),
                     max_seq_length=256, doc_stride=128,
                     files={"train": str(_squad_slice(shared_data, tmp_path, 600))})
    examples = task.get_examples("train")
    features = task.convert_examples(examples, "train")
    paragraph_of_example = {}
    for i, example in enumerate(examples):
        paragraph_of_example[i] = paragraph_of_example.setdefault(
            " ".join(example.doc_tokens), len(paragraph_of_example))
    windows = [tuple(ids[mask > 0]) for ids, mask in zip(features["input_word_ids"],
                                                        features["input_mask"])]
    row_of_ids = {window: row for row, window in enumerate(windows)}  # same text: same row
    paragraph = np.array([paragraph_of_example[e] for e in features["example_index"]])
    n, batch = len(paragraph), 16
    assert n > 500

    buckets = data_lib.batch_bucket_lengths(256, compiled=False)
    training = finetune._TrainingData(len(examples), n // batch, 0, examples)
    dataset_fn = finetune._training_dataset_fn(types.SimpleNamespace(train_batch_size=batch),
                                               task, training, buckets)
    rows, widths, seen = [], [], collections.Counter()
    for x, _ in dataset_fn(tf.distribute.InputContext(), InputPosition(seed=1)).take(n // batch):
        ids, mask = x["input_word_ids"].numpy(), x["input_mask"].numpy()
        widths.append(ids.shape[1])
        # the bucket of the batch's longest row
        assert widths[-1] == min(b for b in buckets if b >= mask.sum(1).max())
        seen.update(tuple(r[m > 0]) for r, m in zip(ids, mask))
        rows.append([row_of_ids[tuple(r[m > 0])] for r, m in zip(ids, mask)])
    rows = np.array(rows)
    assert not seen - collections.Counter(windows)  # each window at most once an epoch

    def pairs(batch_rows):
        _, counts = np.unique(paragraph[batch_rows], return_counts=True)
        return (counts * (counts - 1) // 2).sum()

    _, sizes = np.unique(paragraph, return_counts=True)
    at_random = batch * (batch - 1) / 2 * (sizes * (sizes - 1)).sum() / (n * (n - 1))
    assert np.mean([pairs(r) for r in rows]) < 1.5 * at_random, (
        np.mean([pairs(r) for r in rows]), at_random)
