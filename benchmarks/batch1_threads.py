"""Single short requests: which thread count and precision serve them fastest?

Real SST-2 dev sentences, one request each, through the raw-text signature of our float32
and bfloat16 SST-2 exports (the same untrained head on MiniLM-L6-H384 as
`serving_latency.py`, made in the same --work_dir), against HF's fast tokenizer +
onnxruntime (float32) on the same sentences. One process per intra-op thread count
(TensorFlow fixes its thread pools at start; TF Serving's
`--tensorflow_intra_op_parallelism` is the same setting) and per setting of
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS (read once per process; docs/serving.md tells a server
to set it: oneDNN then keeps each matmul's weights reordered for its brgemm kernels);
inside a process the contestants run in interleaved rounds. Ours run twice: through
`tf.saved_model.load` in Python, and as TF Serving runs a SavedModel (a TF1 Session,
", Session"), which skips the Python function-call layer; the Session runs twice, with
one inter-op thread and with the graph run on the calling thread (", caller thread":
inter-op parallelism -1, what `tensorflow_model_server --tensorflow_inter_op_parallelism=-1`
sets; no hand-off to an inter-op thread and back per request and per expensive op).
The SST-2 exports split in two (`export_model --parallel_branches=2`, ", 2 branches") run
in a Session with two inter-op threads of its own, which runs each layer's two halves at
once.
The floor (", dense products alone (floor)"): a Session with the same thread settings that
runs only the encoder's dense products (MatMul+BiasAdd, the FFN's with its activation, as
the export's kernels fuse them; pooler and classifier included) on a [tokens, hidden] input
of each sentence's own length, in each precision: what this runtime (TensorFlow's oneDNN
matmul ops and its executor) costs per request before the tokenizer, embeddings, attention
products, softmax and LayerNorms (it keeps a cast in and out, and a slice per layer where
the attention would be). Where the floor is above a peer's time, no rewrite of the rest of
the graph run this way (its intra-op threads, no inter-op parallelism) can lead that peer.
onnxruntime, and OpenVINO in its default precision for this CPU (bf16 where the CPU has
it), run at every thread count of --thread_counts in every process (their threads are
their own), so each of ours is compared with their best in the same process, under the
same machine conditions. In the one-thread process, the caller-thread Sessions and
onnxruntime on one thread also answer the sentences from two client threads at once
(", 2 clients at once": two requests in flight, as a server with one intra-op thread per
request serves two clients on two cores); their ms per sentence is wall time / sentences,
a throughput, compared with onnxruntime's the same way. The exports are made first, in a process without the
frozen-weights setting. Prints ms per sentence and, for each of ours, onnxruntime's best
time in the same process / ours and the best onnxruntime time over all processes / ours
(above 1: we are faster).

    flock /work/bench.lock env PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python \\
        benchmarks/batch1_threads.py --thread_counts=1,2 --frozen_weights=0,1 \\
        --sentences=300 --rounds=3

Run it alone on a quiet machine: PyTorch's and onnxruntime's threads spin.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from serving_latency import BF16, FROZEN_WEIGHTS_ENV, SPLIT, cpu_description, dense_shapes, \
    export_in_clean_process, export_models, export_onnx, frozen_weights_env, glue_dev, \
    minilm_dir, openvino_models, openvino_run

ORT = "HF tokenizer + onnxruntime"
OPENVINO = "HF tokenizer + OpenVINO"  # in its default precision for this CPU
OURS = {"ours float32 raw text": "sst-2", "ours bfloat16 raw text": "sst-2" + BF16}
# The contestants run as TF Serving runs a SavedModel, by inter-op setting: one inter-op
# thread, or every op on the thread that calls Session::Run.
CALLER_THREAD = ", Session, caller thread"
SESSIONS = {", Session": 1, CALLER_THREAD: -1}
# The exports split in two (export_model --parallel_branches=2), as the server the docs
# describe for them runs them: two inter-op threads, so both halves of a layer run at once.
SPLIT_OURS = {"ours float32 raw text, 2 branches": "sst-2" + SPLIT,
              "ours bfloat16 raw text, 2 branches": "sst-2" + BF16 + SPLIT}
SPLIT_SESSION = (", Session, 2 inter-op threads", 2)
CLIENTS = ", 2 clients at once"
FLOOR = {"ours float32 dense products alone (floor)": "float32",
         "ours bfloat16 dense products alone (floor)": "bfloat16"}


def from_two_clients(answer, requests: list) -> None:
    """Answers `requests` from two threads at once, alternate requests each (Session::Run
    and onnxruntime's run release the GIL while they compute)."""
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda part: [answer(r) for r in part], (requests[0::2], requests[1::2])))


def peer_name(threads: int, peer: str = ORT) -> str:
    return f"{peer}, {threads} thread{'s' * (threads > 1)}"


def session_callable(tf, path: str, threads: int, inter_op_threads: int = 1):
    """The SavedModel's raw-text signature as TF Serving runs it: loaded into a TF1
    Session (as its SavedModelBundle is) and called through Session::Run on the signature's
    tensor names, without the Python function-call layer of `tf.saved_model.load`.
    `inter_op_threads=-1` runs the graph on the calling thread (TF's DirectSession does so
    for a negative inter-op setting). With more than one inter-op thread the Session gets
    its own pool (as a server's one model would: TF's global inter-op pool takes the size
    of the first Session that asks for it)."""
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads, inter_op_parallelism_threads=inter_op_threads,
        use_per_session_threads=inter_op_threads > 1))
    with graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
    signature = meta.signature_def["serving_default"]
    # Every output, as TF Serving's Predict returns them (fetching logits alone would let
    # the graph skip the softmax, argmax and label lookup).
    return session.make_callable([t.name for t in signature.outputs.values()],
                                 [signature.inputs["text"].name])


def products_alone_callable(tf, config, dtype: str, threads: int):
    """A caller-thread Session (as `session_callable`'s) whose graph is only the encoder's
    dense products for `config` (a BertConfig) in `dtype`, chained in the order
    `serving_latency.dense_shapes` lists them: per layer the fused query/key/value product,
    the attention output (on the first third of its output: a slice stands for the
    attention), the FFN's two products (the first with the activation), then the pooler
    (first row)
    and a 2-class classifier (also in `dtype`, for simplicity; the export's head is float32:
    a [1, hidden] product, tens of microseconds). Random weights, stored in `dtype` as the
    bfloat16 export's kernels are; fed float32 [tokens, hidden] (zeros: a product's time
    does not depend on the values)."""
    from bert_tf.layers.activations import get_activation

    hidden = config.hidden_size
    activation = get_activation(config.hidden_act)
    graph = tf.Graph()
    with graph.as_default():
        rng = np.random.default_rng(0)

        def dense(x, rows, cols, act=None):
            kernel = tf.Variable(tf.constant(rng.normal(0, 0.02, (rows, cols)), dtype))
            bias = tf.Variable(tf.zeros([cols], dtype))
            y = tf.nn.bias_add(tf.matmul(x, kernel), bias)
            return act(y) if act else y

        tokens = tf.compat.v1.placeholder(tf.float32, [None, hidden], name="tokens")
        x = tf.cast(tokens, dtype)
        for j, (rows, cols) in enumerate(dense_shapes(config)):
            if x.shape[-1] != rows:  # query/key/value in, attention output next
                x = x[:, :rows]
            # A layer's 4 products in order; the FFN's first (the third) is activated.
            x = dense(x, rows, cols, activation if j % 4 == 2 else None)
        pooled = dense(x[:1], hidden, hidden, tf.tanh)
        logits = tf.cast(dense(pooled, hidden, 2), tf.float32)
        init = tf.compat.v1.global_variables_initializer()
    session = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads, inter_op_parallelism_threads=-1))
    session.run(init)
    return session.make_callable(logits, [tokens])


def measure(threads: int, work_dir: str, sentences: int, rounds: int,
            ort_thread_counts: list) -> dict:
    """ms per sentence of each contestant with `threads` intra-op threads (this process);
    onnxruntime at each of `ort_thread_counts`."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import onnxruntime
    import tensorflow_text  # noqa: F401  (the raw-text signatures' ops)
    import torch
    from transformers import BertTokenizerFast

    from bert_tf.model.config import BertConfig

    torch.set_num_threads(threads)
    # Made by the parent, without the setting.
    paths = export_models(work_dir, make=False, split=True)
    rows = [r[0] for r in glue_dev("sst-2")[:sentences]]
    hf_tok = BertTokenizerFast.from_pretrained(minilm_dir())
    ort_sessions = {}
    for ort_threads in ort_thread_counts:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = ort_threads, 1
        ort_sessions[ort_threads] = onnxruntime.InferenceSession(
            export_onnx(work_dir), options, providers=["CPUExecutionProvider"])
    openvino = {}
    for ov_threads in ort_thread_counts:
        default = next((compiled for name, compiled in openvino_models(
            export_onnx(work_dir), ov_threads).items() if name.endswith("(its default)")))
        openvino[ov_threads] = default
    ov_precision = default[0].get_property("INFERENCE_PRECISION_HINT").get_type_name()
    texts = [tf.constant([t]) for t in rows]
    feeds = [np.array([t], dtype=object) for t in rows]  # built ahead, as `texts` are

    def ours(fn):
        for t in texts:
            fn(text=t)["logits"].numpy()

    def hf_encode(text):
        enc = hf_tok([text], max_length=128, truncation=True, padding="longest",
                     return_tensors="np")
        return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}

    def ort_one(session, text):
        session.run(["pooler_output"], hf_encode(text))

    contestants = {name: (lambda fn=tf.saved_model.load(paths[export]).signatures[
        "serving_default"]: ours(fn)) for name, export in OURS.items()}
    for name, export in OURS.items():
        for suffix, inter_op_threads in SESSIONS.items():
            call = session_callable(tf, paths[export], threads, inter_op_threads)
            contestants[name + suffix] = lambda call=call: [call(t) for t in feeds]
            # Two clients on the caller thread only: a Session with one inter-op thread,
            # called from two threads at once, left onnxruntime's two threads slower for the
            # rest of the process (5.5 -> 7.6 ms a sentence; benchmarks/HISTORY.md, runs 3-5).
            if threads == 1 and inter_op_threads < 0:
                contestants[name + suffix + CLIENTS] = (
                    lambda call=call: from_two_clients(call, feeds))
    config = BertConfig.from_file(os.path.join(work_dir, "minilm", "bert_config.json"))
    token_feeds = [np.zeros([hf_encode(t)["input_ids"].shape[1], config.hidden_size],
                            np.float32) for t in rows]
    for name, dtype in FLOOR.items():
        call = products_alone_callable(tf, config, dtype, threads)
        contestants[name + CALLER_THREAD] = (
            lambda call=call: [call(t) for t in token_feeds])
    for name, export in SPLIT_OURS.items():
        call = session_callable(tf, paths[export], threads, SPLIT_SESSION[1])
        contestants[name + SPLIT_SESSION[0]] = lambda call=call: [call(t) for t in feeds]
    for ort_threads, session in ort_sessions.items():
        contestants[peer_name(ort_threads)] = (
            lambda session=session: [ort_one(session, t) for t in rows])
        if threads == 1 and ort_threads == 1:
            contestants[peer_name(1) + CLIENTS] = (
                lambda session=session: from_two_clients(lambda t: ort_one(session, t), rows))
    for ov_threads, compiled in openvino.items():
        contestants[peer_name(ov_threads, f"{OPENVINO} {ov_precision}")] = (
            lambda compiled=compiled: [openvino_run(compiled, hf_encode(t)) for t in rows])
    for fn in contestants.values():
        fn()  # warm-up: every sentence length once
    times = {name: [] for name in contestants}
    for _ in range(rounds):
        for name, fn in contestants.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) / len(rows) * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thread_counts", default="1,2")
    parser.add_argument("--frozen_weights", default="0,1",
                        help=f"{FROZEN_WEIGHTS_ENV} settings to measure (a process each)")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "serving_bench"))
    parser.add_argument("--child_threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    thread_counts = [int(t) for t in args.thread_counts.split(",")]
    if args.child_threads:
        print(json.dumps(measure(args.child_threads, args.work_dir, args.sentences,
                                 args.rounds, thread_counts)))
        return
    os.makedirs(args.work_dir, exist_ok=True)
    cpu = cpu_description()
    del cpu["onednn_frozen_weights"]  # each child process has its own setting
    print(f"CPU: {cpu['model']}, {cpu['cpus']} CPUs, flags {' '.join(cpu['isa_flags'])}; "
          f"load average {cpu['load_average']:.2f}", flush=True)
    export_in_clean_process(args.work_dir, split=True)
    results = {}
    for frozen in [int(f) for f in args.frozen_weights.split(",")]:
        env = frozen_weights_env(bool(frozen))
        for threads in thread_counts:
            out = subprocess.run([sys.executable, __file__, f"--child_threads={threads}",
                                  f"--work_dir={args.work_dir}",
                                  f"--thread_counts={args.thread_counts}",
                                  f"--sentences={args.sentences}", f"--rounds={args.rounds}"],
                                 check=True, capture_output=True, text=True, env=env).stdout
            process = f"{threads} thread{'s' * (threads > 1)}, frozen weights {frozen}"
            results[process] = json.loads(out.strip().splitlines()[-1])
    ort_names = [peer_name(t) for t in thread_counts]
    best_ort = min(times[n] for times in results.values() for n in ort_names)
    best_ort_clients = min([t[peer_name(1) + CLIENTS] for t in results.values()
                            if peer_name(1) + CLIENTS in t] or [float("nan")])
    print(f"SST-2 dev, first {args.sentences} sentences, one per request, raw text in; "
          f"ms per sentence (median of {args.rounds} rounds); load average now "
          f"{os.getloadavg()[0]:.2f}")
    width = max(len(name) for times in results.values() for name in times) + 2
    print(f"   {'process':32s}{'contestant':{width}s}{'ms':>8s}  best ort same process / this  "
          f"best ort / this  best OpenVINO same process / this")
    for process, times in results.items():
        ort_here = min(times[n] for n in ort_names)
        openvino_here = min(ms for n, ms in times.items() if n.startswith(OPENVINO))
        for name, ms in times.items():
            if name.startswith((ORT, OPENVINO)):
                ratios = ""
            elif name.endswith(CLIENTS):
                ratios = (f"{times[peer_name(1) + CLIENTS] / ms:28.2f}  "
                          f"{best_ort_clients / ms:15.2f}")
            else:
                ratios = (f"{ort_here / ms:28.2f}  {best_ort / ms:15.2f}  "
                          f"{openvino_here / ms:34.2f}")
            print(f"   {process:32s}{name:{width}s}{ms:8.2f}  {ratios}")
    print(f"   (rows ending '{CLIENTS}': wall time / sentences with two requests in flight, "
          f"compared with '{peer_name(1) + CLIENTS}')")
    print(json.dumps({"cpu": cpu, "ms_per_sentence": results}))


if __name__ == "__main__":
    main()
