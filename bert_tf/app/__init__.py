"""What makes a module a command:

    cli.py             run_main(main, define_flags): the one entry wrapper (one-line user
                       errors, exit codes, quiet TensorFlow start-up); TF-free
    setting_fields.py  setting(): one field that is a flag, a YAML key and a frozen config
                       field; the TF-free setting groups (text, corpus); TF-free
    settings.py        the training commands' setting groups (training, model dir, task)
"""
