"""``plot``: time per configuration from the trials table, one panel per parameter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..tune import ResultStore, describe_arguments, trial_problem
from .results import function_pattern, write_output


def run_plot(args: Any, url: str) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plot needs matplotlib: pip install 'autotune[plot]'") from None
    store = ResultStore(url)
    pattern = function_pattern(args.function)
    trials = [t for t in store.trials(function=pattern)
              if t.status == "ok" and not trial_problem(t) and t.median_seconds]
    if not trials:
        raise ValueError(f"no successful trials stored for {args.function!r}; "
                         "see `python -m autotune show` for what is there")
    parameters = [json.loads(t.parameters) for t in trials]
    names = sorted({name for p in parameters for name in p})
    series: dict[str, list[tuple[dict, float]]] = {}
    for t, p in zip(trials, parameters):
        label = f"{t.key.device_name}: {describe_arguments(t.key.arguments)}"
        series.setdefault(label, []).append((p, t.median_seconds * 1e6))
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        values = sorted({p.get(name) for p in parameters}, key=lambda v: (str(type(v)), v))
        position = {v: i for i, v in enumerate(values)}
        for label, points in series.items():
            xs = [position[p.get(name)] for p, _ in points]
            ax.scatter(xs, [us for _, us in points], label=label, alpha=0.7, s=18)
        ax.set_xticks(range(len(values)), [str(v) for v in values], rotation=45)
        ax.set_xlabel(name)
        ax.set_ylabel("median time per call (us)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{args.function}: {len(trials)} configurations")
    fig.tight_layout()
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create the folder of {out}: {exc.strerror or exc}") from None
    write_output(out, buffer.getvalue())
    plt.close(fig)
    print(f"wrote {args.out}")
    return 0
