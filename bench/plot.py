"""The latency plot: p50 and p95 against concurrent clients, one panel per kind of input."""

from __future__ import annotations

from pathlib import Path

from .report import LoadRow


def plot_latency(rows: list[LoadRow], target: Path) -> bool:
    """Write the PNG; False (and no file) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a server
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    kinds = list(dict.fromkeys(r.kind for r in rows))
    figure, axes = plt.subplots(1, len(kinds), figsize=(5.5 * len(kinds), 4), squeeze=False)
    for axis, kind in zip(axes[0], kinds, strict=True):
        mine = sorted((r for r in rows if r.kind == kind), key=lambda r: r.clients)
        clients = [r.clients for r in mine]
        axis.plot(clients, [r.p50 for r in mine], "o-", label="p50")
        axis.plot(clients, [r.p95 for r in mine], "s--", label="p95")
        axis.set_xscale("log", base=2)
        axis.set_xticks(clients, [str(c) for c in clients])
        axis.set_ylim(bottom=0)
        axis.set_xlabel("concurrent clients")
        axis.set_ylabel("latency (s)")
        axis.set_title(kind)
        axis.grid(True, alpha=0.3)
        for r in mine:
            axis.annotate(f"{r.per_second:.2f}/s", (r.clients, r.p50), textcoords="offset points",
                          xytext=(4, -12), fontsize=8)  # fmt: skip
        axis.legend()
    figure.suptitle("POST /extract latency against concurrency (requests/s annotated)")
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    plt.close(figure)
    return True
