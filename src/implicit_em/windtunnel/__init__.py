"""The Bayesian wind tunnel: tasks with exact posteriors, models, metrics in bits, a runner.

``tasks`` samples fresh sequences with their exact posteriors; ``models`` holds a small GPT and a
capacity-matched MLP; ``metrics`` measures entropy error and KL in bits; ``train`` runs (and
resumes) one configuration; ``figures`` draws the results; ``cli`` is ``implicit-em windtunnel``.
"""
