"""A W&B workspace for GradSkipCallback runs: one command makes it in your project.

Usage (needs ``pip install gradskip-lightning[dashboard]``; saving it to W&B needs a W&B login)::

    python -m gradskip_lightning.dashboard                # offline: writes gradskip-workspace.json
    python -m gradskip_lightning.dashboard --entity my-team --project my-project
    python -m gradskip_lightning.dashboard --entity E --project P --prefix gradskip/ --regions object tag

The definition (the workspace's JSON, as W&B stores it) is always written to ``--output``. It is saved
to W&B when an entity and a project are given (``--entity``/``--project``, or ``WANDB_ENTITY``/
``WANDB_PROJECT``) and ``WANDB_MODE`` is not ``offline`` or ``disabled``; otherwise, or when saving fails
(no API key, no connection), the command says what saving needs, in one message, not a traceback.

The workspace groups panels by the first part of their key (faithfulness, regions, transplant,
discovery, drift, gates, probes, heads, as the callback logs them; see :mod:`gradskip_lightning.engine.keys`)
and has, in this order:

- one line chart per score over the callback's epochs, in its section: every scalar field of
  :class:`~gradskip_lightning.engine.scoring.record.ProbeRecord` (a per-region one for each region in
  ``--regions``), a compared score with the explained method and every compared method on one
  chart (picked by a regular expression, so any ``compare_methods`` show up); drift and the
  gates of every layer;
- the discovery section: one chart per per-class value (suspicion, flip rates, cues) with every class,
  and the class-mean map grid with a step slider;
- the overlay grid of every method with a step slider, the per-probe table, and the layer x head
  images with a step slider.

:func:`build_workspace` builds it without saving (no connection needed); :func:`main` saves it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from gradskip_lightning.engine.discovery.stage import CLASS_VALUES
from gradskip_lightning.engine.keys import SECTIONS, key, score_pattern
from gradskip_lightning.engine.output.report import HEAD_PARTS
from gradskip_lightning.engine.scoring.record import scalar_fields

__all__ = ["build_workspace", "main", "score_charts", "workspace_definition"]

#: Sections shown open.
OPEN = ("faithfulness", "regions", "probes")


def score_charts(wr, prefix: str, regions: Sequence[str]) -> dict[str, list]:
    """Section -> one line chart per scalar field of the record (one per region of a per-region
    field): the explained method's key, and for a compared score every compared method's by regex."""
    charts: dict[str, list] = {}
    for scalar in scalar_fields().values():
        names = [f"{scalar.name}/{region}" for region in regions] if scalar.regions else [scalar.name]
        for name in names:
            chart = dict(title=name, x=key(None, prefix, "epoch"), y=[key(scalar.section, prefix, name)])
            if scalar.compared:
                chart["metric_regex"] = score_pattern(scalar.section, prefix, name)
            charts.setdefault(scalar.section, []).append(wr.LinePlot(**chart))
    return charts


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
        entity: the W&B entity it will be saved under.
        project: the W&B project it will be saved in.
        prefix: the callback's ``log_prefix``.
        regions: the probes' region names with mass and rank charts (e.g. ``object``, ``tag``).
        compare_methods: the callback's ``methods.compare``, whose overlay grids are shown too
            (their scores are on the score charts whatever this says).
        name: the workspace's name.
    """
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    wide = wr.Layout(w=24, h=12)
    epoch = key(None, prefix, "epoch")  # the x axis of every line chart
    panels = score_charts(wr, prefix, regions)
    panels["drift"] = [
        wr.LinePlot(title=f"drift {kind}", x=epoch, y=[key("drift", prefix, f"{r}/{kind}") for r in ("prev", "first")])
        for kind in ("spearman", "topk_iou")
    ]
    gates_regex = f"^{re.escape(key('gates', prefix, 'layer_'))}[0-9]+$"
    panels["gates"] = [wr.LinePlot(title="mean gate beta_main per layer", x=epoch, metric_regex=gates_regex)]
    grids = [key("probes", prefix, "overlays")] + [key("probes", prefix, "overlays", method=m) for m in compare_methods]
    panels["probes"] = [
        wr.MediaBrowser(title="overlays", media_keys=grids, gallery_axis="step", layout=wide),
        wr.WeavePanelSummaryTable(table_name=key("probes", prefix, "table"), layout=wide),
    ]
    per_class = f"^{re.escape(key('discovery', prefix, ''))}" + "{}/class_[0-9]+$"
    panels["discovery"] = [
        wr.LinePlot(title=f"{name} per class", x=epoch, metric_regex=per_class.format(re.escape(name)))
        for name in CLASS_VALUES
        if name != "hotspot/top"
    ]
    panels["discovery"].append(
        wr.MediaBrowser(
            title="class-mean maps",
            media_keys=[key("discovery", prefix, "class_means")],
            gallery_axis="step",
            layout=wide,
        )
    )
    heads = [key("heads", prefix, part) for part in HEAD_PARTS.values()]
    panels["heads"] = [
        wr.MediaBrowser(title="head importance (layer x head)", media_keys=heads, gallery_axis="step", layout=wide)
    ]
    sections = [  # a section without panels here (correction) still groups its keys by their first part
        ws.Section(name=section, panels=panels[section], is_open=section in OPEN)
        for section in SECTIONS
        if section in panels
    ]
    settings = ws.WorkspaceSettings(group_by_prefix="first")
    return ws.Workspace(entity=entity, project=project, name=name, sections=sections, settings=settings)


def workspace_definition(workspace) -> dict:
    """The workspace as the JSON W&B stores (entity, project, name, the sections and their panels)."""
    return workspace._to_model().model_dump(by_alias=True, exclude_none=True, mode="json")


def _not_saved(why: str, args: argparse.Namespace) -> str:
    """What saving the workspace to W&B needs, after ``why`` it was not saved."""
    entity, project = args.entity or "<entity>", args.project or "<project>"
    return (
        f"not saved to W&B: {why}. To save it: log in once (`wandb login`, or set WANDB_API_KEY), then run\n"
        f"  python -m gradskip_lightning.dashboard --entity {entity} --project {project}\n"
        "with WANDB_MODE unset (or online); the workspace opens in that project's runs."
    )


def main(argv: Sequence[str] | None = None):
    """Command-line entry point: build the workspace, write its definition, and save it to W&B where it
    can (see the module docstring); returns it. Exits with status 1 when saving was asked for and failed."""
    parser = argparse.ArgumentParser(
        prog="python -m gradskip_lightning.dashboard", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--entity", default=os.environ.get("WANDB_ENTITY"), help="W&B entity (default: $WANDB_ENTITY)")
    parser.add_argument(
        "--project", default=os.environ.get("WANDB_PROJECT"), help="W&B project of the runs (default: $WANDB_PROJECT)"
    )
    parser.add_argument("--prefix", default="gradskip/", help="the callback's log_prefix (default: gradskip/)")
    parser.add_argument("--regions", nargs="*", default=["object"], help="region names to chart (default: object)")
    parser.add_argument("--compare", nargs="*", default=[], help="the callback's compare_methods, for their grids")
    parser.add_argument("--name", default="GradSkip", help="workspace name (default: GradSkip)")
    parser.add_argument(
        "-o", "--output", default="gradskip-workspace.json", help="the definition's JSON file (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        import wandb_workspaces  # noqa: F401
    except ImportError:
        sys.exit('the workspace needs the dashboard extra: pip install "gradskip-lightning[dashboard]"')
    workspace = build_workspace(
        args.entity or "",
        args.project or "",
        prefix=args.prefix,
        regions=args.regions,
        compare_methods=args.compare,
        name=args.name,
    )
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(workspace_definition(workspace), indent=1) + "\n")
    sections = ", ".join(section.name for section in workspace.sections)
    print(f"wrote the workspace definition {output} ({len(workspace.sections)} sections: {sections})")
    mode = os.environ.get("WANDB_MODE", "")
    if not (args.entity and args.project):
        print(_not_saved("no --entity and --project given", args))
    elif mode in ("offline", "disabled", "dryrun"):
        print(_not_saved(f"WANDB_MODE is {mode}", args))
    else:
        try:
            workspace.save()
        except Exception as err:  # noqa: BLE001 (W&B's login, network and server errors: one message each)
            message = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else ""
            sys.exit(_not_saved(f"{type(err).__name__}: {message}".rstrip(": "), args))
        print(f"saved workspace {args.name!r}: {workspace.url}")
    return workspace


if __name__ == "__main__":
    main()
