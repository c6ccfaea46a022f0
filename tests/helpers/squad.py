"""SQuAD data the SQuAD tests share: a vocab, two contexts, v1.1 and v2.0 articles over
them, and a writer of the dataset's JSON files. The tokenizer over VOCAB is a conftest.py
fixture (squad_tokenizer)."""

import json

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "cafe", "muller", "opened", "in", "paris", "(", ")", ".", "-", "18", "##95", "19",
         "##43", "it", "closed", "later", "who", "when", "what", "then", "?", "where",
         "did", "the", "cat", "sat", "on", "mat", "is", "dog", "sit", "a", "b", "c", "x",
         "y", "z", ","]

CTX1 = "Café  Müller opened\tin Paris (1895-1943). It closed later"
CTX2 = "The cat sat\u202fon the mat ."


def make_qa(qid, question, text=None, start=None, impossible=False, answers=None):
    """One question of a paragraph's "qas", answered by `text` at `start` (or `answers`,
    or none when `impossible`)."""
    entry = {"id": qid, "question": question}
    if answers is not None:
        entry["answers"] = answers
    elif impossible:
        entry["answers"] = []
    else:
        entry["answers"] = [{"text": text, "answer_start": start}]
    if impossible:
        entry["is_impossible"] = True
    return entry


def v1_data():
    """SQuAD v1.1 articles on CTX1 (one answer_start wrong)."""
    return [{"title": "t", "paragraphs": [{"context": CTX1, "qas": [
        make_qa("first", "Who opened in Paris?", "Café  Müller", 0),
        make_qa("year", "When?", "1895", CTX1.index("1895")),
        make_qa("last", "What then?", "later", CTX1.index("later")),
        make_qa("wrong", "Where?", "Paris", 0),                # wrong answer_start
    ]}]}]


def v2_data():
    """SQuAD v2.0 articles on CTX2 (one question without an answer)."""
    return [{"title": "t", "paragraphs": [{"context": CTX2, "qas": [
        make_qa("pos", "Where did the cat sit?", "on the mat", CTX2.index("on")),
        make_qa("neg", "Where is the dog?", impossible=True),
    ]}]}]


def write_json(path, articles, version="v1.1"):
    """Writes `articles` as a SQuAD dataset file; returns the path as a string."""
    path.write_text(json.dumps({"version": version, "data": articles}, ensure_ascii=False),
                    encoding="utf-8")
    return str(path)
