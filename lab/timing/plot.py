"""The time lab's figure: where each configuration's seconds per token go.

One horizontal bar per configuration, fastest at the top: compute and
exposed I/O wait stacked (their sum is the predicted time per token), and
below it a thin bar of the seconds that do not add to it -- I/O hidden
under compute, then speculative reads wasted; each bar's total is written
at its end.  Beside each bar, on its own axis, the configuration's miss
ratio, written too (an oracle's 0.003 draws no visible bar).  The legend
sits under both axes, so it covers no bar.  :func:`bars` is what is drawn
(the tests check it); :func:`time_figure` draws it.
"""

from __future__ import annotations

from typing import Any

#: Colours of the four parts.
COLOURS = {"compute_s": "#4c72b0", "wait_s": "#dd8452",
           "hidden_s": "#55a868", "wasted_s": "#c44e52"}
#: Labels of the four parts in the legend.
LABELS = {"compute_s": "compute", "wait_s": "exposed I/O wait",
          "hidden_s": "I/O hidden under compute (not added)",
          "wasted_s": "speculative reads wasted (not added)"}
#: The most configurations one figure shows (the fastest).
MAX_BARS = 48


def bars(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The drawn data, top bar first: labels, the four parts (ms/token), miss ratios."""
    chosen = sorted(rows, key=lambda r: (r["s_per_token"], r["config"]))[:MAX_BARS]
    out: dict[str, list[Any]] = {"label": [], "miss_ratio": []}
    for part in COLOURS:
        out[part] = []
    for r in chosen:
        label = r["config"]
        if r.get("page_cache_share"):
            label += f" pc={r['page_cache_share']:g}"
        out["label"].append(label)
        out["miss_ratio"].append(r["miss_ratio"])
        for part in COLOURS:
            out[part].append(r[part] * 1e3)
    return out


def time_figure(rows: list[dict[str, Any]], title: str) -> Any:
    """The figure of :func:`bars` (matplotlib, off screen).

    Each bar's total (ms per token) is written at its end and each miss
    ratio beside its bar; the legend sits under both axes, outside the data.
    """
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    data = bars(rows)
    n = len(data["label"])
    fig, (ax, axm) = plt.subplots(1, 2, sharey=True, width_ratios=(4, 1),
                                  figsize=(12, max(3.4, 0.32 * n + 2.2)), dpi=100,
                                  layout="constrained")
    ys = list(range(n))
    left = [0.0] * n
    for part in ("compute_s", "wait_s"):
        ax.barh([y - 0.12 for y in ys], data[part], left=left, height=0.5,
                color=COLOURS[part], label=LABELS[part])
        left = [a + b for a, b in zip(left, data[part], strict=True)]
    totals = left
    left = [0.0] * n
    for part in ("hidden_s", "wasted_s"):
        ax.barh([y + 0.3 for y in ys], data[part], left=left, height=0.18,
                color=COLOURS[part], label=LABELS[part])
        left = [a + b for a, b in zip(left, data[part], strict=True)]
    widest = max([*totals, *left, 0.0]) or 1.0
    for y, total in zip(ys, totals, strict=True):
        ax.annotate(f"{total:.3f}", (total, y - 0.12), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=7)
    ax.set_xlim(0, widest * 1.12)  # room for the totals
    ax.set_yticks(ys, data["label"], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per token (predicted; the bar's end, compute + wait, "
                  "is written beside it)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    axm.barh(ys, data["miss_ratio"], height=0.5, color="#8172b3")
    for y, ratio in zip(ys, data["miss_ratio"], strict=True):
        inside = ratio > 0.7  # near the right edge: written inside the bar
        axm.annotate(f"{ratio:.3f}", (ratio, y), xytext=(-3 if inside else 3, 0),
                     textcoords="offset points", va="center", fontsize=7,
                     ha="right" if inside else "left",
                     color="white" if inside else "black")
    axm.set_xlim(0, 1)
    axm.set_xlabel("miss ratio")
    axm.grid(axis="x", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center",
               ncol=4, fontsize=8, frameon=False)
    return fig


def plot_time(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """Draw :func:`time_figure` into a PNG at ``path``."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig = time_figure(rows, title)
    fig.savefig(path, format="png")
    plt.close(fig)
