"""The Bayesian wind tunnel: tasks with exact posteriors, models, metrics in bits, a runner.

`tasks` samples fresh sequences with their exact posteriors (and the bijection's analytic
context-free floor); `models` holds a small GPT and two capacity-matched MLP controls (prefix and
position-wise); `metrics` measures entropy error and KL in bits; `train` runs (and resumes)
one configuration; `grid` runs models x objectives x seeds in the CLI's directories;
`timescales` measures how far attention and values are from their final state (C12);
`tracing` wraps the tracer around training; `figures` draws the results; `cli` is
`implicit-em windtunnel`.
"""
