"""Fuzzing the input readers: random bytes, truncated files and damaged copies of valid
files fed to every reader of user data (GLUE tsv, CoNLL-2003, SQuAD json, SWAG csv, the
pretraining corpus of create_pretraining_data and build_vocab). Every case must end in
success or in one `BertTfError` line naming the file (the commands print it and exit 1),
never another exception (a traceback); through the command line, exit 0 or one line and
exit 1, and nothing written on failure. Seeded: the same cases every run."""

import json
import os
import random
import subprocess
import sys

import pytest

from bert_tf.core.errors import BertTfError
from tests.helpers import REPO, SPECIAL_TOKENS, command_env, wait_all, write_vocab

SEED = 24
CASES_PER_READER = 80  # in process; each reader gets as many

# Small valid files, the seeds of the mutations.
SST2 = b"sentence\tlabel\na good movie \t1\nan awful film \t0\ntruly wonderful \t1\n"
COLA = b"gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\ngj04\t0\t*\tThe more books.\n"
STSB = (b"index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
        b"0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\t"
        b"An air plane is taking off.\t5.000\n")
CONLL = (b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP "
         b"B-MISC\ncall NN I-NP O\n. . O O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n")
SWAG = (b",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,"
        b"ending3,label\n0,lsmdc3001,19,\"He opens it, then.\",He opens it,Then he,gold,"
        b"reads,\"eats, a lot\",runs,sleeps,0\n1,anetv,2,A man sits.,A man,He,gen,stands,"
        b"sits,walks,\"talks\",3\n")
SQUAD = json.dumps({"version": "1.1", "data": [{"title": "Seoul", "paragraphs": [{
    "context": "Seoul is the capital of South Korea. It lies on the Han river.",
    "qas": [{"id": "q1", "question": "What is the capital of South Korea?",
             "answers": [{"text": "Seoul", "answer_start": 0}]},
            {"id": "q2", "question": "Which river?",
             "answers": [{"text": "Han", "answer_start": 53}]}]}]}]}).encode()
CORPUS = (b"The sailors rode the breeze clear of the rocks.\nThey went home.\n\n"
          b"A second document starts here.\nIt has two lines.\n\nA third one.\nShort.\n")


def mutations(valid: bytes, rng: random.Random, n: int):
    """`n` damaged versions of `valid` (and a few files of nothing but noise)."""
    fixed = [b"", b"\n", b"\xef\xbb\xbf", b"\x00" * 10, valid[:len(valid) // 2],
             valid + b"\xff\xfe", valid.replace(b"\n", b"\r"), valid.replace(b"\t", b" ")]
    yield from fixed
    is_json = valid.startswith(b"{")
    for _ in range(n - len(fixed)):
        kind = rng.randrange(8 if is_json else 7)
        data = bytearray(valid)
        if kind == 7:  # valid JSON, a value of the wrong type somewhere
            yield json.dumps(_replace_a_value(json.loads(valid), rng)).encode()
        elif kind == 0:  # random bytes
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        elif kind == 1:  # random printable text with separators
            alphabet = b"ab \t\n,\"'{}[]:01-.\r\\"
            yield bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 400)))
        elif kind == 2:  # truncated anywhere
            yield bytes(data[:rng.randrange(len(data))])
        elif kind == 3:  # bytes overwritten
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            yield bytes(data)
        elif kind == 4:  # invalid UTF-8 or NUL inserted
            at = rng.randrange(len(data) + 1)
            yield bytes(data[:at] + rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\x00",
                                                b"\xed\xa0\x80"]) + data[at:])
        elif kind == 5:  # a span deleted
            a = rng.randrange(len(data))
            b = min(len(data), a + rng.randrange(1, 40))
            yield bytes(data[:a] + data[b:])
        else:  # lines shuffled and duplicated
            lines = bytes(data).split(b"\n")
            picked = [rng.choice(lines) for _ in range(rng.randrange(1, 2 * len(lines)))]
            yield b"\n".join(picked)


def _replace_a_value(tree, rng):
    nodes = []

    def walk(node):
        for key in (range(len(node)) if isinstance(node, list) else
                    node.keys() if isinstance(node, dict) else ()):
            nodes.append((node, key))
            walk(node[key])
    walk(tree)
    node, key = rng.choice(nodes)
    node[key] = rng.choice([None, 7, -1, "x", "", [], {}, True, [1], {"a": 1}])
    return tree


def check(call, path, case, failures):
    """One case: success, or a one-line BertTfError naming the file."""
    try:
        call()
    except BertTfError as e:
        message = str(e)
        if "\n" in message or os.path.basename(str(path)) not in message:
            failures.append((case, f"{type(e).__name__}: {message!r}"))
    except Exception as e:  # noqa: BLE001 - what the test looks for
        failures.append((case, f"{type(e).__name__}: {e!r}"[:300]))


def glue_reader(name, filename, split="train"):
    def read(directory):
        from bert_tf import tasks

        return tasks.make_task(name, data_dir=str(directory)).get_examples(split)
    return filename, read


def conll_reader():
    def read(directory):
        from bert_tf import tasks

        return tasks.make_task("conll2003", data_dir=str(directory)).get_examples("train")
    return "eng.train", read


def swag_reader(split):
    def read(directory):
        from bert_tf import tasks

        return tasks.make_task("swag", data_dir=str(directory)).get_examples(split)
    return {"train": "train.csv", "test": "test.csv"}[split], read


def squad_reader(split, version_2=False):
    def read(directory):
        from bert_tf.tasks.squad import SquadTask

        path = str(directory / "squad.json")
        task = SquadTask(files={split: path}, version_2_with_negative=version_2)
        return task.get_examples(split)
    return "squad.json", read


READERS = {
    "glue-sst2": (SST2, glue_reader("sst-2", "train.tsv")),
    "glue-sst2-test": (b"index\tsentence\n0\ta film\n", glue_reader("sst-2", "test.tsv", "test")),
    "glue-cola": (COLA, glue_reader("cola", "train.tsv")),
    "glue-stsb": (STSB, glue_reader("sts-b", "dev.tsv", "dev")),
    "conll2003": (CONLL, conll_reader()),
    "swag-train": (SWAG, swag_reader("train")),
    "swag-test": (SWAG, swag_reader("test")),
    "squad-train": (SQUAD, squad_reader("train")),
    "squad-dev-v2": (SQUAD, squad_reader("dev", version_2=True)),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_task_readers_end_in_examples_or_one_line(reader, tmp_path):
    valid, (filename, read) = READERS[reader]
    read_valid_dir = tmp_path / "valid"
    read_valid_dir.mkdir()
    (read_valid_dir / filename).write_bytes(valid)
    assert read(read_valid_dir)  # the seed file itself reads
    rng = random.Random(f"{SEED}-{reader}")
    failures, cases = [], 0
    for k, data in enumerate(mutations(valid, rng, CASES_PER_READER)):
        directory = tmp_path / f"c{k}"
        directory.mkdir()
        (directory / filename).write_bytes(data)
        check(lambda: read(directory), directory / filename, (k, data[:120]), failures)
        cases += 1
    assert cases == CASES_PER_READER
    assert not failures, f"{len(failures)} of {cases} cases failed, e.g. {failures[:3]}"


@pytest.fixture(scope="module")
def corpus_vocab(tmp_path_factory):
    words = sorted(set(CORPUS.decode().lower().replace(".", " . ").split()))
    return write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt",
                       SPECIAL_TOKENS + words + list("abcdefghijklmnopqrstuvwxyz."))


def test_corpus_readers_end_in_records_or_one_line(tmp_path, corpus_vocab):
    """create_pretraining_data and build_vocab in process: records / a vocab, or one line;
    nothing in the output directory on failure."""
    from data_prep import build_vocab
    from data_prep import pretraining_job, pretraining_passes

    rng = random.Random(f"{SEED}-corpus")
    failures, cases = [], 0
    for k, data in enumerate(mutations(CORPUS, rng, CASES_PER_READER // 2)):
        src = tmp_path / f"c{k}.txt"
        src.write_bytes(data)
        out = tmp_path / f"out{k}"
        cfg = pretraining_passes.JobConfig(input_file=str(src), output_file=str(out / "r.tfrecord"),
                            vocab_file=corpus_vocab, max_seq_length=16,
                            max_predictions_per_seq=2, dupe_factor=1, num_workers=0,
                            progress=False)
        before = len(failures)
        check(lambda: pretraining_job.run(cfg), src, ("create_pretraining_data", k, data[:120]),
              failures)
        ok = len(failures) == before and os.path.exists(pretraining_job.summary_path(cfg))
        if not ok and out.exists() and os.listdir(out):
            failures.append((("create_pretraining_data", k), f"wrote {os.listdir(out)}"))
        vocab_out = tmp_path / f"vocab{k}.txt"
        check(lambda: build_vocab.build_vocab(str(src), str(vocab_out), 60, num_unused=0,
                                              do_lower_case=True, min_frequency=1),
              src, ("build_vocab", k, data[:120]), failures)
        cases += 2
    assert cases == CASES_PER_READER
    assert not failures, f"{len(failures)} of {cases} cases failed, e.g. {failures[:3]}"


def test_commands_on_damaged_inputs(tmp_path, corpus_vocab):
    """A handful of the cases through the command line (as users run them): exit 1 and one
    line, nothing written."""
    rng = random.Random(f"{SEED}-cli")
    noise = tmp_path / "noise.txt"
    noise.write_bytes(bytes(rng.randrange(256) for _ in range(300)))
    latin1 = tmp_path / "glue"
    latin1.mkdir()
    (latin1 / "train.tsv").write_bytes(SST2[:-9] + b"caf\xe9 \t1\n")
    runs = [
        ("data_prep.create_pretraining_data", [f"--input_file={noise}",
                                               f"--vocab_file={corpus_vocab}", "--num_workers=1",
                                               f"--output_file={tmp_path / 'r' / 'x.tfrecord'}"],
         tmp_path / "r", "not a UTF-8 text corpus"),
        ("data_prep.build_vocab", [f"--input_file={noise}", "--vocab_size=60", "--num_unused=0",
                                   f"--vocab_file={tmp_path / 'v' / 'vocab.txt'}"],
         tmp_path / "v", "not a UTF-8 text corpus"),
        ("data_prep.create_finetuning_data", ["--task_name=sst-2", f"--data_dir={latin1}",
                                              f"--vocab_file={corpus_vocab}",
                                              f"--output_dir={tmp_path / 'f'}"],
         tmp_path / "f", "train.tsv: line 4, byte 13: not valid UTF-8"),
    ]
    # The three commands side by side: each is mostly interpreter + TensorFlow start-up.
    started = []
    for k, (module, args, _, _) in enumerate(runs):
        with open(tmp_path / f"stderr{k}.txt", "w") as stderr:
            started.append(subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO,
                                            env=command_env(), stdout=subprocess.DEVNULL,
                                            stderr=stderr))
    codes = wait_all(started, timeout=300)
    for k, (code, (module, _, output, message)) in enumerate(zip(codes, runs)):
        stderr = (tmp_path / f"stderr{k}.txt").read_text()
        assert code == 1, (module, stderr[-2000:])
        assert "Traceback" not in stderr, stderr[-2000:]
        # One line, the last (progress bars above it are not errors).
        errors = [line for line in stderr.splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and stderr.strip().splitlines()[-1] == errors[0], stderr
        assert message in errors[0], stderr
        assert not output.exists() or not os.listdir(output), os.listdir(output)
