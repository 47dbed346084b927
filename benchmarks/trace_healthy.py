"""False alarms on healthy training of real architectures, and the lead on induced failures.

Three Hugging Face architectures built from their configs (no download), trained on real text
that every machine with Python has: byte-level language modelling on the source files of the
Python standard library (vocabulary 256 bytes, of which many never occur).

* ``gpt2``: GPT-2, learned positions, LayerNorm, GELU MLP.
* ``llama``: Llama, grouped-query attention (4 heads, 2 key/value heads), RoPE, RMSNorm.
* ``mixtral``: Mixtral, the same attention, a top-2 mixture of 4 experts in every layer, with
  its balancing loss (coefficient 0.02).

Every model has 2 layers of width 64, an untied output layer and its config's defaults
otherwise (GPT-2's attention, residual and embedding dropout 0.1), and trains on batches of
8 × 64 bytes under the tracer at ``every=5``, measuring each of the first 10 steps as well
(``measure_first=10``: a failure of the output layer shows in the loss within a few steps).
Runs stored before that option existed (seeds 0-5) were measured at ``every=5`` alone; each
run file records its ``measure_first``. Regimes (`REGIMES`):

* ``healthy``: AdamW at 1e-3 with 30 linear warm-up steps (the control of every failure).
* ``unstable``: Adam at 3e-2 without warm-up (attention entropy collapse, logit growth).
* ``no_balance``: Mixtral without its balancing loss, its router at 3e-2 (router collapse).
* ``logit_drift``: GPT-2's healthy run, but the output layer at 0.3 without warm-up and
  without z-loss (log Z drift).

Each run (architecture, regime, seed) is written to ``OUT/ARCH-REGIME-SEED.json`` as it
finishes (its losses and site records); a run whose file exists is not run again, so an
interrupted benchmark resumes. ``report`` replays the tracer's alarm rules (`Alarms`, the same
code `Tracer.step` runs) over the stored records with the current thresholds, and prints:

* false alarms per 1,000 healthy steps, per rule and per architecture;
* for each induced failure and seed: the first alarm (step, rule), the step at which the loss
  shows the failure (the rule of ``trace_failures.py``: the 5-step moving average more than
  10% and 0.05 nats above the healthy run of the same seed for 5 consecutive steps, or a
  non-finite loss) and the lead time (loss step minus alarm step);
* precision (of the runs that raised an alarm, the share that were induced) and recall (of
  the induced runs, the share with an alarm no later than the loss showed the failure).

    PYTHONPATH=src python benchmarks/trace_healthy.py run [--arch gpt2 llama mixtral]
        [--regime healthy unstable no_balance logit_drift] [--seeds 0 1 2] [--steps 500]
        [--out runs/trace_healthy]
    PYTHONPATH=src python benchmarks/trace_healthy.py report [--seeds 0 1 2] [--out ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import sysconfig
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from implicit_em.machine import summary
from implicit_em.trace import CollapseWarning, Thresholds, Tracer
from implicit_em.trace.alarms import Alarms

sys.path.insert(0, str(Path(__file__).parent))
from trace_failures import loss_shows

ARCHS = ("gpt2", "llama", "mixtral")
WIDTH, LAYERS, HEADS, KV_HEADS, EXPERTS, TOP_K = 64, 2, 4, 2, 4, 2
BALANCE = 0.02
"""Mixtral's balancing-loss coefficient in the healthy run."""
BATCH, LENGTH, EVERY, MEASURE_FIRST = 8, 64, 5, 10
CORPUS_BYTES = 8 * 2**20


@dataclass(frozen=True)
class Regime:
    """How a run trains: the optimizer, its rates and warm-up, and the balancing loss."""

    description: str
    optimizer: str
    lr: float
    warmup: int
    head_lr: float | None = None
    router_lr: float | None = None
    balance: bool = True
    archs: tuple[str, ...] = ARCHS


REGIMES = {
    "healthy": Regime("AdamW 1e-3, 30 warm-up steps", "adamw", 1e-3, 30),
    "unstable": Regime("Adam 3e-2, no warm-up", "adam", 3e-2, 0),
    "no_balance": Regime(
        "no balancing loss, router at 3e-2 (else healthy)",
        "adamw",
        1e-3,
        30,
        router_lr=3e-2,
        balance=False,
        archs=("mixtral",),
    ),
    "logit_drift": Regime(
        "output layer at 0.3 without warm-up or z-loss (else healthy)",
        "adamw",
        1e-3,
        30,
        head_lr=0.3,
        archs=("gpt2",),
    ),
}


def corpus() -> torch.Tensor:
    """The bytes of the standard library's `.py` files, in sorted path order (at most
    `CORPUS_BYTES`), as a uint8 tensor."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, size = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        data = path.read_bytes()
        chunks.append(data)
        size += len(data)
        if size >= CORPUS_BYTES:
            break
    return torch.frombuffer(bytearray(b"".join(chunks)[:CORPUS_BYTES]), dtype=torch.uint8)


def build(arch: str, balance: bool) -> nn.Module:
    """The architecture built from its config (random weights, no download)."""
    import transformers

    common = {
        "vocab_size": 256,
        "hidden_size": WIDTH,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "intermediate_size": 2 * WIDTH,
        "max_position_embeddings": LENGTH,
        "tie_word_embeddings": False,
    }
    if arch == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=256,
            n_embd=WIDTH,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=LENGTH,
            tie_word_embeddings=False,
            bos_token_id=0,
            eos_token_id=0,
        )
        cls = transformers.GPT2LMHeadModel
    elif arch == "llama":
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    else:
        cfg = transformers.MixtralConfig(
            num_local_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            router_aux_loss_coef=BALANCE,
            output_router_logits=balance,
            **common,
        )
        cls = transformers.MixtralForCausalLM
    return cls._from_config(cfg, attn_implementation="sdpa")


def _groups(model: nn.Module, regime: Regime) -> list[dict]:
    """Parameter groups: the output layer and the routers at their own rate where the regime
    sets one."""
    head, router, rest = [], [], []
    for name, p in model.named_parameters():
        if regime.head_lr is not None and name.startswith("lm_head"):
            head.append(p)
        elif regime.router_lr is not None and ".mlp.gate." in name:
            router.append(p)
        else:
            rest.append(p)
    groups = [{"params": rest, "lr": regime.lr, "warmup": regime.warmup}]
    if head:
        groups.append({"params": head, "lr": regime.head_lr, "warmup": 0})
    if router:
        groups.append({"params": router, "lr": regime.router_lr, "warmup": 0})
    return groups


def train(arch: str, regime: Regime, seed: int, steps: int, text: torch.Tensor) -> dict:
    """One run: its per-step losses and the tracer's site records."""
    torch.manual_seed(seed)
    model = build(arch, regime.balance)
    groups = _groups(model, regime)
    kind = torch.optim.AdamW if regime.optimizer == "adamw" else torch.optim.Adam
    opt = kind(groups)
    rates = [(g["lr"], g["warmup"]) for g in opt.param_groups]
    data = torch.Generator().manual_seed(1000 + seed)
    losses = []
    start = time.perf_counter()
    with (
        warnings.catch_warnings(),
        Tracer(model, every=EVERY, measure_first=MEASURE_FIRST, flush_every=10**6) as tracer,
    ):
        warnings.simplefilter("ignore", CollapseWarning)
        for step in range(steps):
            for g, (lr, warmup) in zip(opt.param_groups, rates, strict=True):
                g["lr"] = lr * min(1.0, (step + 1) / warmup) if warmup else lr
            offsets = torch.randint(0, len(text) - LENGTH - 1, (BATCH,), generator=data)
            ids = torch.stack([text[o : o + LENGTH] for o in offsets.tolist()]).long()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
            losses.append(float(loss.detach()))
    records = [r for r in tracer.history if r["kind"] == "site"]
    seconds = time.perf_counter() - start
    return {
        "losses": losses,
        "records": records,
        "seconds": seconds,
        "measure_first": MEASURE_FIRST,
    }


def replay(records: Iterable[dict], thresholds: Thresholds) -> list[dict]:
    """The alarms the tracer's rules raise from these site records (in step order)."""
    rules = Alarms(thresholds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollapseWarning)
        return [a for r in records for a in rules(r)]


def _path(out: Path, arch: str, regime: str, seed: int) -> Path:
    return out / f"{arch}-{regime}-{seed}.json"


def run(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    text = corpus()
    print(f"machine: {summary('cpu')}")
    print(f"corpus: {len(text)} bytes of the standard library's .py files", flush=True)
    for seed in args.seeds:
        for regime_name in args.regime:
            regime = REGIMES[regime_name]
            for arch in args.arch:
                path = _path(args.out, arch, regime_name, seed)
                if arch not in regime.archs or path.exists():
                    continue
                result = train(arch, regime, seed, args.steps, text)
                result |= {"arch": arch, "regime": regime_name, "seed": seed, "steps": args.steps}
                path.write_text(json.dumps(result))
                alarms = replay(result["records"], Thresholds())
                print(
                    f"{arch:8} {regime_name:12} seed {seed}: loss {result['losses'][0]:.2f} -> "
                    f"{result['losses'][-1]:.2f}, {len(alarms)} alarms, "
                    f"{result['seconds']:.0f} s",
                    flush=True,
                )


def _first(alarms: list[dict]) -> dict | None:
    return min(alarms, key=lambda a: a["step"]) if alarms else None


def report(args: argparse.Namespace) -> None:
    thresholds = Thresholds()
    runs = {}
    for path in sorted(args.out.glob("*.json")):
        r = json.loads(path.read_text())
        if r["seed"] in args.seeds:
            runs[(r["arch"], r["regime"], r["seed"])] = r
    print(f"machine: {summary('cpu')}")
    print(f"seeds {args.seeds}; {thresholds}")
    first = sorted({r.get("measure_first", 0) for r in runs.values()})
    print(
        "\nhealthy runs: false alarms per 1,000 steps, per rule (alarm records; "
        f"every={EVERY}, measure_first {first})"
    )
    alarmed: dict[tuple, bool] = {}
    for arch in ARCHS:
        healthy = [r for (a, g, _), r in runs.items() if a == arch and g == "healthy"]
        if not healthy:
            continue
        steps = sum(r["steps"] for r in healthy)
        counts: dict[str, int] = {}
        for r in healthy:
            alarms = replay(r["records"], thresholds)
            alarmed[(arch, "healthy", r["seed"])] = bool(alarms)
            for a in alarms:
                counts[a["alarm"]] = counts.get(a["alarm"], 0) + 1
        rates = ", ".join(f"{k} {1000 * v / steps:.2f}" for k, v in sorted(counts.items()))
        final = sum(r["losses"][-1] for r in healthy) / len(healthy)
        print(
            f"  {arch:8} {len(healthy)} runs, {steps} steps, final loss {final:.2f}: "
            f"{rates or 'none (0.00)'}"
        )
    print("\ninduced failures: first alarm, loss shows it, lead (loss step - alarm step)")
    caught = total = 0
    for regime_name, regime in REGIMES.items():
        if regime_name == "healthy":
            continue
        for arch in regime.archs:
            for seed in args.seeds:
                bad, good = runs.get((arch, regime_name, seed)), runs.get((arch, "healthy", seed))
                if bad is None or good is None:
                    continue
                alarms = replay(bad["records"], thresholds)
                alarmed[(arch, regime_name, seed)] = bool(alarms)
                first = _first(alarms)
                shows = loss_shows(bad["losses"], good["losses"])
                total += 1
                on_time = first is not None and (shows is None or first["step"] <= shows)
                caught += on_time
                rules = sorted({a["alarm"] for a in alarms})
                lead = "—" if first is None or shows is None else shows - first["step"]
                where = "missed" if first is None else f"{first['step']} {first['alarm']}"
                print(
                    f"  {arch:8} {regime_name:12} seed {seed}: first alarm {where}; "
                    f"loss shows {'never' if shows is None else shows}; lead {lead}; "
                    f"loss {bad['losses'][-1]:.2f} vs {good['losses'][-1]:.2f}; rules {rules}"
                )
    flagged = [k for k, v in alarmed.items() if v]
    induced_flagged = sum(1 for k in flagged if k[1] != "healthy")
    precision = induced_flagged / len(flagged) if flagged else math.nan
    recall = caught / total if total else math.nan
    print(
        f"\nprecision {precision:.2f} ({induced_flagged} of {len(flagged)} alarmed runs induced); "
        f"recall {recall:.2f} ({caught} of {total} induced runs alarmed no later than the loss)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "report"])
    parser.add_argument("--arch", nargs="+", default=list(ARCHS), choices=ARCHS)
    parser.add_argument("--regime", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path("runs/trace_healthy"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("implicit_em.trace").setLevel(logging.ERROR)  # alarms are counted here
    logging.getLogger("transformers").setLevel(logging.ERROR)
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
