"""The Bayesian wind tunnel: tasks with exact posteriors, models, metrics in bits, a runner.

`tasks` samples fresh sequences with their exact posteriors (and the bijection's analytic
context-free floor); `models` holds a small GPT and two capacity-matched MLP controls (prefix and
position-wise); `metrics` measures entropy error and KL in bits; `config` states a run
(`RunConfig`, the presets); `losses` the objectives; `optim` the optimizer, its schedule and
the frozen parts of an intervention; `evaluation` the held-out evaluation and the plateau rule;
`checkpoint` the resumable state; `train` runs (and resumes) one configuration; `seeds` trains
several seeds of one configuration together (`stacked` models, `stacked_optim` AdamW and
clipping per seed, `seeds_checkpoint` their state); `run_dirs` names a run's folder; `grid`
runs many; `timescales` measures how far each part is from its final state and `interventions`
freezes one part at step t (C12); `tracing` wraps the tracer around training; `figures` draws
the results; `cli` is `implicit-em windtunnel`.
"""
