"""The model directory: write, find, restore with shape checks, load_encoder."""

import numpy as np
import pytest

from bert_tf.model import model_dir, run_record
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretrainer import BertPretrainer
from tests.helpers import tiny_config

CFG = tiny_config(vocab_size=60, num_hidden_layers=2, max_position_embeddings=32)
INPUTS = {"input_word_ids": np.array([[2, 5, 9, 3, 0]]),
          "input_mask": np.array([[1, 1, 1, 1, 0]]),
          "input_type_ids": np.zeros((1, 5), "int32")}


def test_write_and_load_encoder(tmp_path):
    vocab = tmp_path / "src_vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    pretrainer = BertPretrainer(CFG)
    out = tmp_path / "model"
    prefix = model_dir.write_model_dir(
        str(out), CFG, {"encoder": pretrainer.encoder, "masked_lm": pretrainer.masked_lm,
                        "next_sentence": pretrainer.next_sentence},
        vocab_file=str(vocab), do_lower_case=True)
    assert model_dir.resolve_checkpoint(str(out)) == prefix
    assert model_dir.find_config(prefix) == CFG
    assert model_dir.find_vocab(str(out)).endswith("vocab.txt")
    assert model_dir.read_tokenizer_config(str(out))["do_lower_case"] is True
    encoder = model_dir.load_encoder(str(out))
    np.testing.assert_allclose(encoder(INPUTS)["sequence_output"],
                               pretrainer.encoder(INPUTS)["sequence_output"], atol=1e-6)
    # The heads restore too, tied to the restored embeddings.
    fresh = BertPretrainer(CFG)
    model_dir.restore(str(out), {"encoder": fresh.encoder, "masked_lm": fresh.masked_lm,
                                 "next_sentence": fresh.next_sentence})
    batch = dict(INPUTS, masked_lm_positions=np.array([[1, 2]]))
    np.testing.assert_allclose(fresh(batch)["mlm_logits"], pretrainer(batch)["mlm_logits"],
                               atol=1e-5)


def test_mismatched_shapes_name_variable_and_both_shapes(tmp_path):
    model_dir.write_model_dir(str(tmp_path), CFG, {"encoder": BertEncoder(CFG)})
    wider = CFG.replace(hidden_size=32, intermediate_size=64)
    with pytest.raises(model_dir.CheckpointMismatchError) as e:
        model_dir.restore(str(tmp_path), {"encoder": BertEncoder(wider)})
    message = str(e.value)
    assert "[16]" in message and "[32]" in message and "variable `" in message


def test_layer_count_and_missing_heads_refused(tmp_path):
    model_dir.write_model_dir(str(tmp_path), CFG, {"encoder": BertEncoder(CFG)})
    with pytest.raises(model_dir.CheckpointMismatchError, match="2 encoder layers"):
        model_dir.restore(str(tmp_path), {"encoder": BertEncoder(CFG.replace(num_hidden_layers=3))})
    with pytest.raises(model_dir.CheckpointMismatchError, match="2 encoder layers"):
        model_dir.restore(str(tmp_path), {"encoder": BertEncoder(CFG.replace(num_hidden_layers=1))})
    pretrainer = BertPretrainer(CFG)
    with pytest.raises(model_dir.CheckpointMismatchError, match="lacks variables"):
        model_dir.restore(str(tmp_path), {"encoder": pretrainer.encoder,
                                          "masked_lm": pretrainer.masked_lm})
    # Partial restore of what exists is fine when asked for.
    model_dir.restore(str(tmp_path), {"encoder": pretrainer.encoder,
                                      "masked_lm": pretrainer.masked_lm}, require_all=False)


def test_missing_things_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        model_dir.resolve_checkpoint(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        model_dir.resolve_checkpoint(str(tmp_path / "ckpt-7"))
    with pytest.raises(FileNotFoundError, match="needs bert_config.json"):
        model_dir.load_encoder(str(tmp_path))
    assert model_dir.find_vocab(str(tmp_path)) is None
    assert "do_lower_case" not in model_dir.read_tokenizer_config(str(tmp_path))


# ------------------------------------------------------------- resolve: one precedence
CASED_VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nHello\nworld\n"


def _metadata_dir(path, vocab_text=CASED_VOCAB, **tokenizer):
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text(vocab_text)
    model_dir.write_metadata(str(path), CFG, **tokenizer)
    return str(path)


def test_resolve_precedence_flag_then_dir_then_vocab_then_default(tmp_path):
    cased = _metadata_dir(tmp_path / "cased")            # nothing recorded
    got = model_dir.resolve(cased)
    assert got.config == CFG and got.vocab_file.endswith("vocab.txt")
    assert got.text == model_dir.TokenizerConfig(False, None, None)          # 3: the vocab
    assert model_dir.resolve(cased, do_lower_case=True).text.do_lower_case  # 1: the flag
    recorded = _metadata_dir(tmp_path / "recorded", do_lower_case=True, strip_accents=False)
    assert model_dir.resolve(recorded).text == model_dir.TokenizerConfig(True, False)  # 2: dir
    assert model_dir.resolve(recorded, do_lower_case=False).text.do_lower_case is False
    # A fine-tuned dir's task_config.json records casing too (after tokenizer_config.json).
    (tmp_path / "cased" / model_dir.TASK_CONFIG_FILE).write_text(
        '{"task_name": "SST-2", "label_list": ["0", "1"], "do_lower_case": true}')
    assert model_dir.resolve(cased).text.do_lower_case is True
    assert model_dir.resolve(cased).task_config["task_name"] == "SST-2"
    # 4: nothing anywhere: lower case, no config, no vocab (require says what to pass).
    empty = model_dir.resolve(str(tmp_path / "none"))
    assert empty.text == model_dir.TokenizerConfig() and empty.config is None
    with pytest.raises(model_dir.ModelDirError,
                       match=r"needs bert_config.json and vocab.txt .* --bert_config_file "
                             r"and --vocab_file"):
        empty.require(config=True, vocab=True)


def test_resolve_flags_name_files_and_fallback_dirs(tmp_path):
    init = _metadata_dir(tmp_path / "init")
    other = _metadata_dir(tmp_path / "other", vocab_text="[PAD]\n[UNK]\nhello\n",
                          do_lower_case=True)
    # The flag's files win over the dir's; a missing one is named.
    got = model_dir.resolve(init, vocab_file=str(tmp_path / "other" / "vocab.txt"))
    assert got.vocab_file == str(tmp_path / "other" / "vocab.txt") and got.text.do_lower_case
    with pytest.raises(model_dir.ModelDirError, match=r"--vocab_file=.*nope: no such file"):
        model_dir.resolve(init, vocab_file=str(tmp_path / "nope"))
    # --init_checkpoint first, then the fallbacks (finetune's --output_dir, to resume).
    assert model_dir.resolve(None, fallbacks=[other]).text.do_lower_case is True
    assert model_dir.resolve(init, fallbacks=[other]).vocab_file.startswith(init)
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        model_dir.resolve(init).checkpoint


def test_resolve_reads_the_checkpoint_index_once(tmp_path, monkeypatch):
    import tensorflow as tf

    pretrainer = BertPretrainer(CFG)
    model_dir.write_model_dir(str(tmp_path), CFG, {"encoder": pretrainer.encoder,
                                                   "masked_lm": pretrainer.masked_lm})
    reads = []
    load = tf.train.load_checkpoint
    monkeypatch.setattr(tf.train, "load_checkpoint", lambda p: reads.append(p) or load(p))
    resolved = model_dir.resolve(str(tmp_path))
    assert resolved.heads == ("masked_lm",)
    model_dir.restore(resolved, {"encoder": BertEncoder(CFG)})
    model_dir.load_encoder(resolved)
    assert len(reads) == 1


def test_model_dir_imports_nothing_above_it():
    """model_dir is below checkpoints/, tasks/ and training/ (they import it): it takes the
    checkpoint children's names from constants, so no import of it runs back up (not even
    a lazy one inside a function)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(model_dir))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    above = ("bert_tf.checkpoints", "bert_tf.tasks", "bert_tf.training", "bert_tf.model.pretrainer")
    assert not [m for m in imported if m and m.startswith(above)], imported


def test_a_resume_keeps_the_learning_rate_and_batch_but_may_change_the_steps(tmp_path,
                                                                           monkeypatch):
    """docs/contracts.md §6: the optimizer a dir holds includes its schedule. A resume under another
    learning rate or batch is refused (one line naming it); another step count is how long
    to train (logged); an evaluation (no schedule) and phase 2 (a new length) pass."""
    import dataclasses

    logged = []  # absl's logger, whichever handlers an earlier test left on it
    monkeypatch.setattr(run_record.logging, "info", lambda fmt, *a: logged.append(fmt % a))
    out = str(tmp_path / "run")
    schedule = {"learning_rate": 1e-4, "train_batch_size": 32, "warmup_proportion": 0.1}
    run = run_record.RunRecord("finetune", CFG, None, model_dir.TokenizerConfig(), "adamw", 128,
                              schedule=schedule, training_length={"num_train_epochs": 3.0})
    run_record.write_run_record(out, run)
    assert run_record.check_run_dir(out, run) is None
    for name, value in (("learning_rate", 2e-4), ("train_batch_size", 16)):
        changed = dataclasses.replace(run, schedule={**schedule, name: value},
                                      training_length={"num_train_epochs": 4.0})
        with pytest.raises(run_record.RunMismatchError,
                           match=f"run with {name} {schedule[name]}; this run has "
                                 f"{value}:"):
            run_record.check_run_dir(out, changed)
    assert not logged  # a refusal is its one line
    longer = dataclasses.replace(run, training_length={"num_train_epochs": 4.0})
    assert run_record.check_run_dir(out, longer) is None
    assert "--num_train_epochs=3.0 with --num_train_epochs=4.0" in " ".join(logged)
    evaluation = dataclasses.replace(run, optimizer=None, schedule=None, training_length=None)
    assert run_record.check_run_dir(out, evaluation) is None
    phase_2 = dataclasses.replace(run, max_seq_length=512, schedule={**schedule,
                                                                    "learning_rate": 5e-5})
    assert "max_seq_length 128" in run_record.check_run_dir(out, phase_2,
                                                            length_may_change=True)


def test_a_resume_on_other_data_files_says_so_in_one_line(tmp_path, monkeypatch):
    """Not a refusal (docs/contracts.md §6's same run names model, vocab, text, task, optimizer and
    schedule, not the data; phase 2 continues on other records on purpose), but the data
    order cannot continue on other files: one warning line."""
    warned = []
    monkeypatch.setattr(run_record.logging, "warning", lambda fmt, *a: warned.append(fmt % a))
    out = str(tmp_path / "run")
    run = run_record.RunRecord("pretrain", CFG, None, model_dir.TokenizerConfig(), "adamw", 128,
                              data={"input_file": "a/*.tfrecord"})
    run_record.write_run_record(out, run)
    assert run_record.check_run_dir(out, run) is None and not warned
    import dataclasses

    run_record.check_run_dir(out, dataclasses.replace(run, data={"input_file": "b/*"}))
    assert len(warned) == 1 and "--input_file=a/*.tfrecord" in warned[0] \
        and "--input_file=b/*" in warned[0] and "\n" not in warned[0]
