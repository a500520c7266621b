"""bench/results/depth.png: page latency against the depth of the page, from the scale result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness import RESULTS


def depth_png(scale: dict[str, Any] | None) -> Path | None:
    if not scale:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=110)
    for level, style in (("http", "-"), ("core", "--")):
        depth = scale[level]["depth"]
        keyset_label = (
            "keyset, resources/list on catalog serve" if level == "http" else "keyset, core list_page"
        )
        offset_label = "OFFSET, bare route in catalog's app" if level == "http" else "OFFSET, core query"
        axes.plot(
            depth["depth_percent"],
            depth["keyset_median_ms"],
            style,
            marker="o",
            color="tab:blue",
            label=keyset_label,
        )
        axes.plot(
            depth["depth_percent"],
            depth["offset_median_ms"],
            style,
            marker="s",
            color="tab:red",
            label=offset_label,
        )
        if depth.get("floor_median_ms"):
            axes.plot(
                depth["depth_percent"],
                depth["floor_median_ms"],
                style,
                marker="^",
                color="tab:green",
                label="floor: keyset on raw asyncpg, plain table",
            )
    axes.set_xlabel("depth of the page (% of the way through the listing)")
    axes.set_ylabel("page latency, median (ms)")
    axes.set_title(f"resources/list page of {scale['page']} at {scale['resources']:,} resources")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path = RESULTS / "depth.png"
    figure.savefig(path)
    plt.close(figure)
    return path
