"""A W&B workspace for GradSkipCallback runs: one command makes it in your project.

Usage (needs ``pip install gradskip-lightning[dashboard]`` and a W&B login)::

    python -m gradskip_lightning.dashboard --entity my-team --project my-project
    python -m gradskip_lightning.dashboard --entity E --project P --prefix gradskip/ --regions object tag

The workspace groups panels by the first part of their key (faithfulness, regions, transplant,
drift, gates, probes, heads, as the callback logs them; see :mod:`gradskip_lightning.callback.keys`)
and has, in this order:

- one line chart per score over the callback's epochs (insertion, deletion, ins-del, FVT; the relevance mass and rank of
  each region in ``--regions``, the Pointing Game and the maps' segmentation of the object: pixel accuracy, mIoU,
  average precision; the transplant's tag mass) with the explained
  method and every compared method on one chart (picked by a regular expression, so any
  ``compare_methods`` show up), the transplant's flip rate, drift and the gates of every layer;
- the overlay grid of every method with a step slider, the per-probe table, and the layer x head
  images with a step slider.

:func:`build_workspace` builds it without saving (no connection needed); :func:`main` saves it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from gradskip_lightning.callback.keys import key, score_pattern
from gradskip_lightning.callback.report import HEAD_PARTS

__all__ = ["build_workspace", "main", "FAITHFULNESS_SCORES", "OBJECT_SCORES"]

#: The faithfulness scores, each a line chart of every method.
FAITHFULNESS_SCORES = ("insertion", "deletion", "ins_minus_del", "fvt_violation")
#: The scores of the maps against the "object" region, each a line chart of every method.
OBJECT_SCORES = ("pointing_game", "pixel_accuracy", "mean_iou", "average_precision")


def _scores(wr, section: str, prefix: str, names: Sequence[str], title: str = "{}") -> list:
    """One line chart per score: the explained method's key, and every compared method's by regex."""
    return [
        wr.LinePlot(
            title=title.format(name),
            x=key(None, prefix, "epoch"),
            y=[key(section, prefix, name)],
            metric_regex=score_pattern(section, prefix, name),
        )
        for name in names
    ]


def build_workspace(
    entity: str,
    project: str,
    *,
    prefix: str = "gradskip/",
    regions: Sequence[str] = ("object",),
    compare_methods: Sequence[str] = (),
    name: str = "GradSkip",
):
    """The workspace (a ``wandb_workspaces.workspaces.Workspace``, not saved) for one callback's keys.

    Args:
        entity, project: where it will be saved.
        prefix: the callback's ``log_prefix``.
        regions: the probes' region names with mass and rank charts (e.g. ``object``, ``tag``).
        compare_methods: the callback's ``compare_methods``, whose overlay grids are shown too
            (their scores are on the score charts whatever this says).
        name: the workspace's name.
    """
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    wide = wr.Layout(w=24, h=12)
    epoch = key(None, prefix, "epoch")  # the x axis of every line chart
    region_scores = [f"{measure}/{region}" for region in regions for measure in ("mass", "rank")]
    drift = [
        wr.LinePlot(title=f"drift {kind}", x=epoch, y=[key("drift", prefix, f"{r}/{kind}") for r in ("prev", "first")])
        for kind in ("spearman", "topk_iou")
    ]
    gates = wr.LinePlot(
        title="mean gate beta_main per layer",
        x=epoch,
        metric_regex=f"^{re.escape(key('gates', prefix, 'layer_'))}[0-9]+$"
    )
    grids = [key("probes", prefix, "overlays")] + [key("probes", prefix, "overlays", method=m) for m in compare_methods]
    sections = [
        ws.Section(name="faithfulness", panels=_scores(wr, "faithfulness", prefix, FAITHFULNESS_SCORES), is_open=True),
        ws.Section(
            name="regions",
            panels=_scores(wr, "regions", prefix, [*region_scores, *OBJECT_SCORES], title="relevance {}"),
            is_open=True,
        ),
        ws.Section(
            name="transplant",
            panels=[
                wr.LinePlot(title="flip rate to the tag's class", x=epoch, y=[key("transplant", prefix, "flip_rate")]),
                *_scores(wr, "transplant", prefix, ["tag_mass"], title="relevance mass on the transplanted tag"),
            ],
        ),
        ws.Section(name="drift", panels=drift),
        ws.Section(name="gates", panels=[gates]),
        ws.Section(
            name="probes",
            panels=[
                wr.MediaBrowser(title="overlays", media_keys=grids, gallery_axis="step", layout=wide),
                wr.WeavePanelSummaryTable(table_name=key("probes", prefix, "table"), layout=wide),
            ],
            is_open=True,
        ),
        ws.Section(
            name="heads",
            panels=[
                wr.MediaBrowser(
                    title="head importance (layer x head)",
                    media_keys=[key("heads", prefix, part) for part in HEAD_PARTS.values()],
                    gallery_axis="step",
                    layout=wide,
                )
            ],
        ),
    ]
    settings = ws.WorkspaceSettings(group_by_prefix="first")
    return ws.Workspace(entity=entity, project=project, name=name, sections=sections, settings=settings)


def main(argv: Sequence[str] | None = None):
    """Command-line entry point: build the workspace and save it to W&B; returns it."""
    parser = argparse.ArgumentParser(
        prog="python -m gradskip_lightning.dashboard", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--entity", required=True, help="W&B entity (user or team)")
    parser.add_argument("--project", required=True, help="W&B project of the runs")
    parser.add_argument("--prefix", default="gradskip/", help="the callback's log_prefix (default: gradskip/)")
    parser.add_argument("--regions", nargs="*", default=["object"], help="region names to chart (default: object)")
    parser.add_argument("--compare", nargs="*", default=[], help="the callback's compare_methods, for their grids")
    parser.add_argument("--name", default="GradSkip", help="workspace name (default: GradSkip)")
    args = parser.parse_args(argv)
    workspace = build_workspace(
        args.entity,
        args.project,
        prefix=args.prefix,
        regions=args.regions,
        compare_methods=args.compare,
        name=args.name,
    )
    workspace.save()
    print(f"saved workspace {args.name!r}: {workspace.url}")
    return workspace


if __name__ == "__main__":
    main()
