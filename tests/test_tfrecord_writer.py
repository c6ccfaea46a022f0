"""tfrecord_writer's batch encoder: the same bytes as `encode` / TensorFlow, edge cases included."""

import random

import numpy as np
import pytest

from data_prep import pretraining_instances as pi
from data_prep import tfrecord_writer as tw


def random_instances(rng, n_instances, max_len, max_pred, id_limit, edge=True):
    out = []
    for i in range(n_instances):
        n = rng.randint(5, max_len)
        if edge and i % 7 == 0:
            n = max_len  # no padding
        ids = [rng.randint(0, id_limit - 1) for _ in range(n)]
        if edge and i % 5 == 0:
            ids[-1] = id_limit - 1  # largest id (3-byte varint for a 30522 vocab)
            ids[0] = 0
        la = rng.randint(1, n - 4)
        seg = [0] * (la + 2) + [1] * (n - la - 2)
        k = rng.randint(0, min(max_pred, n - 1))
        if edge and i % 6 == 0:
            k = 0  # empty masked lists
        elif edge and i % 6 == 1:
            k = min(max_pred, n - 1)
        pos = sorted(rng.sample(range(1, n), k))
        lab = [rng.randint(0, id_limit - 1) for _ in pos]
        out.append(pi.TrainingInstance(ids, seg, rng.random() < 0.5, pos, lab))
    return out


@pytest.mark.parametrize("max_len,max_pred,id_limit", [(128, 20, 30522), (16, 3, 30522),
                                                      (512, 80, 119547), (8, 1, 100)])
def test_batch_bytes_equal_per_record_encode_and_frame(max_len, max_pred, id_limit):
    rng = random.Random(max_len)
    enc = tw.ExampleEncoder(max_len, max_pred, id_limit=max(id_limit, max_len + 1))
    insts = random_instances(rng, 300, max_len, max_pred, id_limit)
    records = [enc.encode_instance(x) for x in insts]
    for batch in (insts, insts[:1], insts[7:8]):
        a = enc.batch_arrays(batch)
        buf, offsets = enc.encode_arrays(a, framed=False)
        expect = [enc.encode_instance(x) for x in batch]
        got = buf.tobytes()
        assert [got[offsets[r]:offsets[r + 1]] for r in range(len(batch))] == expect
        buf, offsets = enc.encode_arrays(a, framed=True)
        got = buf.tobytes()
        assert got == tw.frame_records(expect)
        assert int(offsets[-1]) == len(got)
    assert b"".join(records)  # the reference path ran on the same instances


def test_batch_equals_tf_example_and_tf_record_writer(tmp_path):
    tf = pytest.importorskip("tensorflow")
    rng = random.Random(1)
    enc = tw.ExampleEncoder(32, 5, id_limit=30522)
    insts = random_instances(rng, 60, 32, 5, 30522)
    buf, _ = enc.encode_arrays(enc.batch_arrays(insts), framed=False)
    expect = []
    for x in insts:
        n, k = len(x.input_ids), len(x.masked_lm_positions)
        feats = {"input_ids": list(x.input_ids) + [0] * (32 - n),
                 "input_mask": [1] * n + [0] * (32 - n),
                 "segment_ids": list(x.segment_ids) + [0] * (32 - n),
                 "masked_lm_positions": list(x.masked_lm_positions) + [0] * (5 - k),
                 "masked_lm_ids": list(x.masked_lm_ids) + [0] * (5 - k),
                 "next_sentence_labels": [int(x.is_random_next)]}
        ex = tf.train.Example(features=tf.train.Features(feature={
            **{key: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
               for key, v in feats.items()},
            "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
                value=[1.0] * k + [0.0] * (5 - k)))}))
        expect.append(ex.SerializeToString(deterministic=True))
    assert buf.tobytes() == b"".join(expect)
    ref = tmp_path / "ref.tfrecord"
    with tf.io.TFRecordWriter(str(ref)) as w:
        for r in expect:
            w.write(r)
    framed, _ = enc.encode_arrays(enc.batch_arrays(insts), framed=True)
    assert framed.tobytes() == ref.read_bytes()


def test_batch_takes_general_segment_ids():
    # Not the [0]*a + [1]*b layout: the general path gives encode's bytes too.
    enc = tw.ExampleEncoder(8, 2)
    insts = [pi.TrainingInstance([101, 5, 102, 6, 102], [1, 0, 0, 1, 1], True, [1], [7]),
             pi.TrainingInstance([101, 5, 102, 6, 102], [0, 0, 2, 1, 1], False, [], []),
             pi.TrainingInstance([101, 5, 102, 6, 102], [0, 0, 0, 1, 1], False, [3], [9])]
    buf, off = enc.encode_arrays(enc.batch_arrays(insts), framed=False)
    assert buf.tobytes() == b"".join(enc.encode_instance(x) for x in insts)


def test_batch_refuses_what_encode_refuses():
    enc = tw.ExampleEncoder(8, 2, id_limit=200)
    ok = pi.TrainingInstance([101, 5, 102, 6, 102], [0, 0, 0, 1, 1], True, [1], [7])
    # Ids beyond the varint table (at least 2**16 entries), as `encode`; negative ones too.
    with pytest.raises(ValueError, match="outside"):
        enc.encode_instance(ok._replace(input_ids=[101, 5, 102, 6, 1 << 16]))
    for bad in (1 << 16, -1):
        bad_inst = ok._replace(input_ids=[101, 5, 102, 6, bad])
        with pytest.raises(ValueError, match="outside"):
            enc.encode_arrays(enc.batch_arrays([ok, bad_inst]))
    with pytest.raises(ValueError, match="exceeds"):
        enc.batch_arrays([ok._replace(input_ids=[1] * 9, segment_ids=[0] * 9)])
    with pytest.raises(ValueError, match="segment"):
        enc.encode_arrays(enc.batch_arrays([ok._replace(segment_ids=[0, 0, 0, 1, 200])]))
    empty, offsets = enc.encode_arrays(enc.batch_arrays([]))
    assert empty.size == 0 and list(offsets) == [0]


def test_record_spill_extend_matches_append():
    enc = tw.ExampleEncoder(16, 3)
    insts = random_instances(random.Random(3), 40, 16, 3, 30522)
    buf, offsets = enc.encode_arrays(enc.batch_arrays(insts), framed=False)
    with tw.RecordSpill() as spill:
        spill.append(b"first")
        spill.extend(buf, offsets)
        spill.append(b"last")
        assert len(spill) == 42
        assert spill[0] == b"first" and spill[41] == b"last"
        assert [spill[i + 1] for i in range(40)] == [enc.encode_instance(x) for x in insts]
    assert np.all(np.diff(offsets) > 0)
