"""What a served model computes (the tasks build their signatures on it):

    graph.py    the serving forward pass from the trained layers' variables (Q/K/V as one
                kernel, optional parallel chains)
    modules.py  ServingModule, EncoderServing (ids + raw text), TaskServing (the tasks'
                base), in-graph text encoding, request limits
"""
