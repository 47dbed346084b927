"""The claims, objections and proposed tests the report checks, each in one line.

IDs follow `docs/theory.md`: C1-C13 the paper's claims, C14a-C14d the four open directions of
its §7.3, R1-R4 and m1-m3 the referee's objections, T1-T3 the referee's proposed tests.

`FAVOURS_PAPER` says, for each item, which verdict speaks for the paper: `supported` for a claim,
`answered` for an objection, and for a proposed test the verdict its authors read as for or
against the paper. The report colours and counts items by that direction (for the paper,
against it, open), not by the word.
"""

from __future__ import annotations

__all__ = ["CLAIMS", "DIRECTIONS", "FAVOURS_PAPER", "direction"]

CLAIMS: dict[str, str] = {
    "C1": "For L = log Σ exp(−d_j), ∂L/∂d_j = −r_j exactly, with r = softmax(−d).",
    "C2": "So every gradient step on such an objective is a responsibility-weighted (EM-like) update.",
    "C3": "Differentiable distances, exponentiation with normalization and gradient training make this unavoidable.",
    "C4": "Unsupervised mixtures: components specialize from random starts; paths and fixed points follow EM's responsibilities.",
    "C5": "Attention weights are responsibilities; values receive responsibility-weighted updates.",
    "C6": "Cross-entropy clamps the correct class; wrong classes still compete, the most responsible get the largest correction.",
    "C7": "Without normalization (correntropy) there is no competition: robust to outliers, but no assignment structure.",
    "C8": "Independent per-class sigmoids do not perform implicit EM.",
    "C9": "Neural objectives lack the log-det volume term, so components can collapse.",
    "C10": "Softmax is closed-world: an out-of-distribution input is assigned to some class, possibly confidently.",
    "C11": "Bayesian-wind-tunnel behaviour (transformers match posteriors, capacity-matched MLPs fail) follows from the objective's geometry.",
    "C12": "Two timescales: attention patterns settle early while values keep refining (E-step before M-step).",
    "C13": "Mixture-of-experts gates are responsibilities; any LSE objective routes like a gate.",
    "C14a": "Open direction (§7.3): explicit volume control (a log-det term, or normalization layers standing in for it) prevents collapse.",
    "C14b": "Open direction (§7.3): soft, noisy, partial and crowd labels act as partial clamps on the responsibilities (label smoothing among them).",
    "C14c": "Open direction (§7.3): a 'none of the above' component (or threshold) gives softmax an open world.",
    "C14d": "Open direction (§7.3): diagnostic tools can read responsibilities from gradients and track specialization and collapse.",
    "R1": "A gradient step is not EM's argmax M-step; they coincide only with the Σ_j/N_j preconditioner (Xu & Jordan).",
    "R2": "Attention is a layer, not a loss: ∂L/∂v_j = Σ_i α_ij g_i and ∂L/∂s_ij = α_ij(a_ij − ā_i).",
    "R3": "Per-step responsibility weighting does not make fixed points Bayesian; 'necessary consequence' is not shown.",
    "R4": "Sign: the minimized NLL −log Σ exp(−d) has gradient +r_j; cross-entropy has 1[j=y] − r_j.",
    "m1": "An LSE over distances without the volume term is not a proper Gaussian-mixture likelihood.",
    "m2": "Forward-pass attention weights are not the same thing as responsibilities arising as gradients.",
    "m3": "The reading 'neural outputs are distances' is imported, not derived.",
    "T1": "Test: train the wind-tunnel transformer with independent sigmoids; if it still matches, normalization is not necessary.",
    "T2": "Test: compare GD trajectories with EM; differences not explained by step size refute exact equivalence.",
    "T3": "Test: do GD fixed points on a Gaussian mixture match EM's maximum-likelihood estimates?",
}

FAVOURS_PAPER: dict[str, str] = {
    **{item: "supported" for item in CLAIMS if item.startswith("C")},
    **{item: "answered" for item in CLAIMS if item[0] in "Rm"},
    # T1: sigmoids still matching the posterior would mean normalization is not necessary.
    "T1": "refuted",
    # T2: differences from EM not explained by step size refute an exact equivalence.
    "T2": "refuted",
    # T3: gradient descent's fixed points matching EM's estimates is what the paper predicts.
    "T3": "supported",
}
"""The item verdict that speaks for the paper."""

DIRECTIONS = ("for the paper", "against the paper", "open")

_AGAINST = {"supported": "refuted", "refuted": "supported", "answered": "stands"}


def direction(item: str, verdict: str) -> str:
    """`for the paper`, `against the paper` or `open` (mixed, inconclusive, not tested) for an
    item's verdict. An algebraic verification of a claim is for the paper and of an objection
    (the referee's sign, m1's missing volume) against it; a violated one the other way round."""
    if verdict in ("verified (algebra)", "violated (algebra)"):
        claim = FAVOURS_PAPER[item] == "supported"
        holds = verdict == "verified (algebra)"
        return DIRECTIONS[0] if claim == holds else DIRECTIONS[1]
    favoured = FAVOURS_PAPER[item]
    if verdict == favoured:
        return DIRECTIONS[0]
    if verdict == _AGAINST[favoured]:
        return DIRECTIONS[1]
    return DIRECTIONS[2]
