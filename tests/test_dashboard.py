"""The W&B workspace template: built offline, every key it names is one a real offline run logged."""

from __future__ import annotations

import json
import re

import pytest
import wandb
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import WandbLogger

from gradskip_lightning import DiscoveryStage, GradSkipCallback, MethodSettings, ProbeSettings, ScoreSettings
from gradskip_lightning.dashboard import build_workspace, main
from gradskip_lightning.engine.keys import SECTIONS
from gradskip_lightning.engine.scoring.record import scalar_fields
from gradskip_lightning.shortcuts import SpuriousTag
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer
from tests.callbacks.wandb_files import find_runs, use_offline_wandb

pytest.importorskip("wandb_workspaces")


@pytest.fixture(scope="module")
def logged_keys(tmp_path_factory) -> set[str]:
    """Every key of a real offline run: regions object and tag, a compared method, the transplant test."""
    root = tmp_path_factory.mktemp("dashboard_run")
    if wandb.run is not None:  # never reuse a run another test left open
        wandb.finish()
    with pytest.MonkeyPatch.context() as mp:
        use_offline_wandb(mp, root)
        seed_everything(0)
        callback = GradSkipCallback(
            scores=ScoreSettings(class_sensitivity=True, insertion_steps=4),
            transplant=True,
            discovery=DiscoveryStage(probes_per_class=4),
            probes=ProbeSettings(num_probes=8),
            methods=MethodSettings(compare=["rollout"]),
        )
        logger = WandbLogger(save_dir=str(root), offline=True, project="dashboard-test")
        data = tiny_data(tag=SpuriousTag(target_class=1, p_in=1.0, p_out=0.5))
        tiny_trainer(root, logger=logger, callbacks=[callback], max_epochs=2).fit(tiny_module(), datamodule=data)
        wandb.finish()
    (run,) = find_runs(root / "wandb")
    return {name for row in run.history for name in row}


def _panels(workspace) -> dict[str, list[dict]]:
    spec = workspace._to_model().model_dump(by_alias=True, exclude_none=True)
    return {s["name"]: s["panels"] for s in spec["spec"]["section"]["panelBankConfig"]["sections"]}


def test_template_sections_and_panels_name_keys_the_callback_logs(logged_keys):
    regions = ["object", "tag"]
    workspace = build_workspace("entity", "project", regions=regions, compare_methods=["rollout"])
    panels = _panels(workspace)
    assert list(panels) == [section for section in SECTIONS if section != "correction"]  # ShortcutCorrection's
    assert list(SECTIONS) == [
        "faithfulness",
        "regions",
        "transplant",
        "discovery",
        "correction",
        "drift",
        "gates",
        "probes",
        "heads",
    ]
    assert workspace.settings.group_by_prefix == "first"
    # every section of the template is a section of the run's keys (text before the first "/")
    assert set(panels) <= {name.split("/")[0] for name in logged_keys}
    charts = [p["config"] for section in panels.values() for p in section if p["viewType"] == "Run History Line Plot"]
    for chart in charts:
        assert chart["xAxis"] == "gradskip/epoch" and chart["xAxis"] in logged_keys
        assert set(chart.get("metrics", [])) <= logged_keys, chart
        if "metricRegex" in chart:
            matched = {name for name in logged_keys if re.search(chart["metricRegex"], name)}
            assert matched and set(chart.get("metrics", [])) <= matched, chart
    titles = {c["chartTitle"]: c for c in charts}
    insertion = {n for n in logged_keys if re.search(titles["insertion"]["metricRegex"], n)}
    assert insertion == {"faithfulness/gradskip/insertion", "faithfulness/gradskip/insertion/rollout"}  # one chart
    # one chart per scalar field of the record (per region for a per-region one), in its section
    scalars = scalar_fields().values()
    expected = {(s.section, f"{s.name}/{r}" if s.regions else s.name) for s in scalars for r in regions}
    shown = {(name, p["config"].get("chartTitle")) for name, section in panels.items() for p in section}
    assert expected <= shown
    assert {f"{m}/{r}" for m in ("mass", "rank") for r in ("object", "tag")} <= set(titles)
    gates = {n for n in logged_keys if re.search(titles["mean gate beta_main per layer"]["metricRegex"], n)}
    assert gates == {"gates/gradskip/layer_0", "gates/gradskip/layer_1"}
    media = [p["config"] for section in panels.values() for p in section if p["viewType"] == "Media Browser"]
    assert next(m for m in media if m["mediaKeys"][0].startswith("probes/"))["mediaKeys"] == [
        "probes/gradskip/overlays",
        "probes/gradskip/overlays/rollout",
    ]
    assert all(set(m["mediaKeys"]) <= logged_keys and m["mode"] == "gallery" for m in media)  # step slider
    (table,) = [p for p in panels["probes"] if p["viewType"] == "Weave"]
    assert "probes/gradskip/table" in str(table["config"]) and "probes/gradskip/table" in logged_keys


def test_a_second_prefix_names_its_own_keys():
    panels = _panels(build_workspace("entity", "project", prefix="rollout/"))
    keys = {k for section in panels.values() for p in section for k in p["config"].get("metrics", [])}
    assert keys and all("/rollout/" in k for k in keys)


def test_the_command_saves_the_workspace(monkeypatch, tmp_path, capsys):
    import wandb_workspaces.workspaces as ws

    saved = []
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr(ws.Workspace, "save", lambda self: saved.append(self) or self)
    monkeypatch.setattr(ws.Workspace, "url", property(lambda self: "https://wandb.example/view"))
    output = tmp_path / "ws.json"
    main(["--entity", "team", "--project", "proj", "--prefix", "gs/", "--regions", "object", "tag", "-o", str(output)])
    (workspace,) = saved
    assert (workspace.entity, workspace.project) == ("team", "proj")
    assert workspace.sections[0].panels[0].y == ["faithfulness/gs/insertion"]
    assert "saved workspace 'GradSkip': https://wandb.example/view" in capsys.readouterr().out
    assert json.loads(output.read_text())["entity"] == "team"


def test_offline_the_command_writes_the_definition_and_says_what_saving_needs(monkeypatch, tmp_path, capsys):
    """As the README prints it (no entity, no project, W&B offline): the definition written, no traceback,
    the next command named; with an entity and a project but no API key (a real W&B login check): one
    message and status 1."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    main([])
    said = capsys.readouterr().out
    spec = json.loads((tmp_path / "gradskip-workspace.json").read_text())
    sections = [s["name"] for s in spec["spec"]["section"]["panelBankConfig"]["sections"]]
    assert sections == [s for s in SECTIONS if s != "correction"]
    assert "wrote the workspace definition gradskip-workspace.json (8 sections" in said
    assert "not saved to W&B: no --entity and --project given" in said and "wandb login" in said
    assert "--entity <entity> --project <project>" in said
    main(["--entity", "team", "--project", "proj"])
    assert "not saved to W&B: WANDB_MODE is offline" in capsys.readouterr().out
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "no-login"))  # no stored key
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(SystemExit) as stopped:
        main(["--entity", "team", "--project", "proj"])
    assert "not saved to W&B: UsageError: No API key configured" in str(stopped.value.code)
    assert "--entity team --project proj" in str(stopped.value.code)
