r"""How much of a trained transformer's score gradient the paper's $-r$ form explains (R2, C5).

For one attention head, queries $q_i$, keys $k_j$, values $v_j$, scores
$s_{ij} = q_i^\top k_j/\sqrt{d_h}$ (causal), weights $\alpha = \operatorname{softmax}_j s$ and
the upstream gradient $g_i = \partial L/\partial o_i$ of the head's output, the exact score
gradient is the advantage law

$$
G_{ij} = \frac{\partial L}{\partial s_{ij}} = \alpha_{ij}(a_{ij} - \bar a_i), \qquad
a_{ij} = g_i^\top v_j,\ \bar a_i = \textstyle\sum_k \alpha_{ik} a_{ik}.
$$

C5, as the paper states it, reads the weights as responsibilities whose gradient has the LSE
form $\partial L/\partial s_{ij} \propto -\alpha_{ij}$ (the $-r$ form). Since adding a constant to
a query's scores changes nothing, every row of $G$ sums to zero; the $-r$ form is given the same
freedom and compared after removing each row's mean over its keys,
$F_{ij} = -(\alpha_{ij} - 1/n_i)$. The share of $G$ that a form $F$ explains, with its best
scale $c$ fitted per head, is the uncentred

$$
R^2(F) = 1 - \frac{\min_c \lVert G - cF\rVert^2}{\lVert G\rVert^2}
       = \frac{\langle G, F\rangle^2}{\lVert G\rVert^2 \lVert F\rVert^2} \in [0, 1],
$$

over every (sequence, query, key) of the head with at least two keys. The rank reading asks
whether, per query, the keys are pulled in the order of their forward weights: the Spearman
correlation over a query's keys between $\alpha_{ij}$ and $-G_{ij}$ (the direction gradient
descent moves $s_{ij}$), averaged over the queries with at least three keys; it is 1 under the
$-r$ form with a positive scale, and near 0 when the advantages are unrelated to the weights. $G$ is autograd's, from
the captured $q, k, v, g$; $R^2$ of the advantage form is then 1 up to rounding (a check of the
capture, not a finding). Under an LSE loss over the scores themselves,
$L = -\sum_i \log\sum_j e^{s_{ij}}$, the same readings give $G = -\alpha$, which row-centred is
the $-r$ form exactly: $R^2 = 1$ and rank correlation 1 (the known answer the controls use).

The captures read a [GPT][implicit_em.windtunnel.models.GPT]'s attention modules through
forward hooks on their input projection (`qkv`, or `query` / `key` / `value`) and their output
projection (`proj`, whose input holds every head's output $o$ and receives $g$).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from implicit_em.attention import attention_gradients, attention_scores
from implicit_em.core import responsibilities
from implicit_em.windtunnel.checkpoint import load_plain
from implicit_em.windtunnel.train import CHECKPOINT, RunConfig, build_model, held_out, loss_fn

__all__ = [
    "HeadCapture",
    "capture_heads",
    "explained_share",
    "head_shares",
    "model_shares",
    "pull_rank_correlation",
    "windtunnel_shares",
]


@dataclass(frozen=True)
class HeadCapture:
    """One attention layer's tensors on one batch, per head: `[B, H, T, E]` each.

    Attributes
    ----------
    q, k, v : Tensor
        Queries, keys and values.
    output : Tensor
        The head outputs $o$ the model computed.
    grad_output : Tensor
        $g = \\partial L/\\partial o$.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    output: Tensor
    grad_output: Tensor


def _heads(x: Tensor, n_head: int) -> Tensor:
    b, t, c = x.shape
    return x.view(b, t, n_head, c // n_head).transpose(1, 2).detach().double()


def capture_heads(model: nn.Module, loss: Callable[[], Tensor]) -> list[HeadCapture]:
    """Run `loss()` (a forward pass of `model` and its loss) and its backward pass, and return
    every causal attention layer's per-head tensors, in the order of the layers.

    A layer is a module with an `n_head`, a `proj` and either `qkv` or `query`, `key` and
    `value` (the wind tunnel's `CausalSelfAttention`). Parameter gradients are left as the
    backward pass writes them; the caller owns the model.

    Raises
    ------
    ValueError
        If `model` has no such layer.
    """
    layers = [m for m in model.modules() if hasattr(m, "n_head") and hasattr(m, "proj")]
    if not layers:
        raise ValueError("model has no attention layer with n_head and proj to capture")
    found: list[dict[str, Tensor]] = [{} for _ in layers]
    handles = []

    def keep(store: dict[str, Tensor], name: str) -> Callable:
        def hook(module: nn.Module, inputs: tuple[Tensor, ...], out: Tensor) -> None:
            store[name] = out

        return hook

    def keep_output(store: dict[str, Tensor]) -> Callable:
        def hook(module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
            o = inputs[0]
            store["o"] = o
            o.register_hook(lambda g: store.__setitem__("g", g))

        return hook

    for layer, store in zip(layers, found, strict=True):
        if hasattr(layer, "qkv"):
            handles.append(layer.qkv.register_forward_hook(keep(store, "qkv")))
        else:
            for name in ("query", "key", "value"):
                handles.append(getattr(layer, name).register_forward_hook(keep(store, name)))
        handles.append(layer.proj.register_forward_pre_hook(keep_output(store)))
    try:
        loss().backward()
    finally:
        for handle in handles:
            handle.remove()
    captures = []
    for layer, store in zip(layers, found, strict=True):
        if "qkv" in store:
            q, k, v = store["qkv"].split(store["o"].shape[-1], dim=2)
        else:
            q, k, v = store["query"], store["key"], store["value"]
        n = layer.n_head
        captures.append(
            HeadCapture(
                *(_heads(x, n) for x in (q, k, v, store["o"], store["g"])),
            )
        )
    return captures


def explained_share(g: Tensor, form: Tensor) -> Tensor:
    r"""$R^2 = \langle G, F\rangle^2 / (\lVert G\rVert^2\lVert F\rVert^2)$ over the last three
    axes (`[..., B, T, T]` -> `[...]`): the share of `g` that `form` explains with its best
    scale. NaN where either is identically zero."""
    dims = (-3, -2, -1)
    inner = (g * form).sum(dims)
    norms = (g * g).sum(dims) * (form * form).sum(dims)
    return torch.where(norms > 0, inner**2 / norms, torch.full_like(inner, float("nan")))


SCORE_LOSSES = ("downstream", "lse")
"""Where the score gradient comes from (`head_shares`): the model's own loss through the head
outputs (the advantage law), or an LSE loss over the scores themselves."""


def head_shares(capture: HeadCapture, loss: str = "downstream") -> dict[str, Tensor]:
    r"""Per head (`[H]`): $R^2$ of the $-r$ form and of the advantage form against autograd's
    score gradient $G$, the rank reading, and the forward residual $\max|\alpha v - o|$ of the
    capture.

    `loss` says where $G$ comes from: `downstream`, the captured upstream gradient $g$ through
    $o = \alpha v$ (the model's own loss: the advantage law); `lse`, the LSE loss over the
    scores, $L = -\sum_i \log\sum_{j \le i} e^{s_{ij}}$, whose gradient is
    $\partial L/\partial s_{ij} = -\alpha_{ij}$ exactly (the responsibilities arising as
    gradients: the known answer of the readings). $G$ is row-centred over each query's keys
    before it is read (the advantage law's rows already sum to zero, so this changes nothing
    there). Queries with a single key (the first position) carry no score gradient and are left
    out.
    """
    if loss not in SCORE_LOSSES:
        raise ValueError(f"loss must be one of {SCORE_LOSSES}, got {loss!r}")
    q, k, v = (x.transpose(0, 1) for x in (capture.q, capture.k, capture.v))  # [H, B, T, E]
    g = capture.grad_output.transpose(0, 1)
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = attention_scores(q, k, is_causal=True, scale=scale).requires_grad_(True)
    alpha = responsibilities(-s)
    if loss == "downstream":
        (autograd,) = torch.autograd.grad(alpha @ v, s, g)
    else:
        (autograd,) = torch.autograd.grad(-torch.logsumexp(s, dim=-1).sum(), s)
    parts = attention_gradients(q, k, v, g, is_causal=True, scale=scale)
    t = s.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=s.device).tril()
    keys = causal.sum(-1, keepdim=True).to(s.dtype)  # n_i = i + 1 keys for query i
    rows = (keys > 1).to(s.dtype)
    alpha = alpha.detach()
    minus_r = -torch.where(causal, alpha - 1.0 / keys, torch.zeros_like(alpha)) * rows
    autograd = torch.where(causal, autograd, torch.zeros_like(autograd))
    autograd = torch.where(causal, autograd - autograd.sum(-1, keepdim=True) / keys, 0.0) * rows
    residual = (alpha @ v - capture.output.transpose(0, 1)).abs().amax((-3, -2, -1))
    return {
        "minus_r": explained_share(autograd, minus_r),
        "minus_r_rank": pull_rank_correlation(alpha, -autograd),
        "advantage": explained_share(autograd, parts.scores * rows),
        "forward_residual": residual,
    }


def _ranks(x: Tensor) -> Tensor:
    return x.argsort(-1).argsort(-1).to(x.dtype)


def pull_rank_correlation(alpha: Tensor, pull: Tensor) -> Tensor:
    """Per head (`[H, B, T, T]` -> `[H]`): the Spearman correlation over each causal query's
    keys between `alpha` and `pull`, averaged over the queries with at least three keys."""
    per_query = []
    for i in range(2, alpha.shape[-1]):
        a, p = _ranks(alpha[..., i, : i + 1]), _ranks(pull[..., i, : i + 1])
        a, p = a - a.mean(-1, keepdim=True), p - p.mean(-1, keepdim=True)
        per_query.append((a * p).sum(-1) / ((a * a).sum(-1) * (p * p).sum(-1)).sqrt())
    return torch.stack(per_query, -1).mean((-2, -1))


def model_shares(
    model: nn.Module, loss: Callable[[], Tensor], score_loss: str = "downstream"
) -> list[dict[str, list[float]]]:
    """[head_shares][] of every attention layer of `model` under `loss()` (the captures), with
    the score gradient from `score_loss`, as plain lists (one dict per layer, one value per
    head)."""
    return [
        {key: [float(v) for v in value] for key, value in head_shares(capture, score_loss).items()}
        for capture in capture_heads(model, loss)
    ]


def windtunnel_shares(config: RunConfig, directory: Path) -> list[dict[str, list[float]]]:
    """[model_shares][] of the wind-tunnel transformer trained in `directory` (its
    `checkpoint.pt`), on the run's own held-out batch and training objective.

    Raises
    ------
    FileNotFoundError
        If `directory` holds no checkpoint.
    """
    path = Path(directory) / CHECKPOINT
    if not path.exists():
        raise FileNotFoundError(f"no wind-tunnel checkpoint at {path}")
    model = build_model(config, config.make_task())
    model.load_state_dict(load_plain(path)["model"])
    batch = held_out(config)
    return model_shares(
        model, lambda: loss_fn(model(batch.tokens), batch, config.objective, config.targets)
    )
