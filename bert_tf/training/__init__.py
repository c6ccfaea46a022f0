"""Training: distribution strategies, optimizers + schedules, losses, the one training loop.

    strategy.py      get_strategy(name, tpu=None)
    optimization.py  AdamWeightDecay (the original's), LAMB, schedules, create_optimizer
    losses.py        pretraining loss and metrics (masked LM + next sentence)
    loop.py          Trainer: the train/eval loop shared by pretraining and fine-tuning
    preemption.py    PreemptionWatcher: SIGTERM -> a flag the running loop reads
    run.py           OutputDirRun: a training run's --output_dir lifecycle (pretrain, finetune)
"""
