"""The standard figures of a traced run, from a tracer's history or its JSON Lines file.

They live with the tracer (`implicit_em.trace.figures`); this module gives them their short
name. Each function draws on a fresh matplotlib `Figure` (Agg canvas, no pyplot state) and
returns it; [standard_figures][implicit_em.plot.standard_figures] writes them all as PNG
files. Requires matplotlib (the `plot` extra).

Examples
--------
```python
import implicit_em as iem

paths = iem.plot.standard_figures("runs/trace.jsonl", "figures/")
```
"""

from __future__ import annotations

from implicit_em.trace.figures import (
    churn,
    effective_k,
    responsibility_mass,
    standard_figures,
    two_timescales,
)

__all__ = ["churn", "effective_k", "responsibility_mass", "standard_figures", "two_timescales"]
