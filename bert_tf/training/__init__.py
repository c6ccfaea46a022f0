"""Training: distribution strategies, optimizers + schedules, losses, the one training loop.

    strategy.py      get_strategy(name, tpu=None)
    optimization.py  AdamWeightDecay (the original's), LAMB, schedules, create_optimizer
    losses.py        pretraining loss and metrics (masked LM + next sentence)
    loop.py          Trainer: the train/eval loop shared by pretraining and fine-tuning
    train_step.py    its compiled steps (steps_per_loop in one tf.function, accumulation)
    checkpoints.py   its checkpoints in --output_dir and the input position to start at
    summaries.py     its log lines and TensorBoard scalars
    preemption.py    PreemptionWatcher: SIGTERM -> a flag the running loop reads
    run.py           training_run: the run skeleton of pretrain and finetune (strategy,
                     --output_dir lifecycle, Trainer and its start point)
"""
