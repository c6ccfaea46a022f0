"""The end-to-end demo (`make demo`) and its small built-in data in demo/data/.

demo/data/ was written for this project by demo/make_demo_data.py (rerun it to
regenerate the files byte for byte): a pretraining corpus and an SST-2-format
sentiment set. See that module's docstring for the files.
"""
