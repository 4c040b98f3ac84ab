"""The Hybrid plans page's jobs (no streamlit): the ``measure --plan`` command that measures a
hybrid plan for real, and its result read back from the job's log (``measure --json``
prints one JSON object: ``status`` and ``peaks``, one per device)."""
from __future__ import annotations

import json
from typing import Optional

from mcap.core.capture.plan import HybridPlan
from mcap.core.types import Profile


def measure_plan_args(profile: Profile, plan: HybridPlan) -> list[str]:
    """``measure --model M --batch-size B --chunks C --plan TEXT --json`` (issue 15's
    contract) under the profile's setup, so the measured peaks answer the predicted ones:
    also its device, schedule, checkpointing and optimizer (the engine, one process per
    device, follows from ``--plan``)."""
    from mcap.core.capture.merging import real_spec
    s = profile.setup
    # A merged profile's plans are over the real layers of the real model (recommend_mesh).
    return ["--model", real_spec(profile), "--batch-size", str(s.batch_size),
            "--chunks", str(s.chunks), "--device", s.device, "--schedule", s.schedule,
            "--checkpoint", s.checkpoint, "--optimizer", s.optimizer,
            "--plan", plan.text, "--json"]


def tp_sizes(profile: Profile):
    """What a tp stage of the profile's model splits (heads, hidden, ffn), for
    ``HybridCosts(tp_sizes=)`` and ``recommend_mesh``: a degree must divide each."""
    from mcap.core.capture.merging import real_spec
    from mcap.models.spec import tensor_parallel_sizes
    return tensor_parallel_sizes(real_spec(profile))


def plan_problem(text: str, layers: int, mesh, costs) -> Optional[str]:
    """Why the plan ``text`` cannot be shown on ``mesh`` (it does not parse, its layers or
    degrees do not fit, or ``costs``, a ``HybridCosts``, cannot predict a stage: a tp degree
    that does not divide what it splits), or None."""
    from mcap.core.capture.plan import check_plan, parse_plan
    from mcap.core.errors import McapError
    try:
        costs.peaks(check_plan(parse_plan(text), layers, mesh))
    except McapError as exc:
        return str(exc)
    return None
def pipeline_measured(profile: Profile, plan: HybridPlan, runs) -> Optional[tuple[int, ...]]:
    """The measured per-device peaks of a pipeline-only ``plan`` (one layer group per
    device) from ``runs`` of the profile's model and setup (``mcap.app.searches
    .measured_runs``: the profile's own, the chosen sweep's, the store's), as every other
    page takes them (issue 40, item 2: Hybrid plans showed "–" for 16,1,5,8 where Pipeline
    memory, explained showed the measured peaks). None for a dp/tp plan, or when the
    partitioning was not measured ok. A merged profile's plans are in the real layers;
    its runs in the merged ones."""
    from mcap.app.searches import measured_for
    from mcap.core.capture.merging import contract, sizes_of
    from mcap.core.errors import McapError
    if not plan.pipeline_only:
        return None
    balance = plan.balance
    sizes = sizes_of(profile)
    if sizes is not None:
        try:
            balance = contract(balance, sizes)
        except McapError:  # a boundary inside a merged layer: no run can be of it
            return None
    run = measured_for(runs, balance)
    if run is None or run.status != "ok" or not run.peaks or len(run.peaks) != plan.devices:
        return None
    return tuple(int(p) for p in run.peaks)


def pipeline_only_why(profile: Profile, mesh) -> Optional[str]:
    """Why a profile that has dp/tp statistics still gets pipeline-only plans on ``mesh``
    (a stage never spans two nodes, so one device per node leaves no room for a dp or tp
    stage), or None when the profile has no dp/tp statistics (the page then says how to
    profile them) or the mesh has room."""
    from mcap.core.capture.hybridcosts import KINDS
    if mesh.per_node > 1 or not any(v.parallel in KINDS and v.degree > 1
                                    for v in profile.variants):
        return None
    return (f"Mesh {mesh.text} has one device per node and a stage never spans two nodes, so "
            f"no stage can be data- or tensor-parallel: the plans here are pipeline-only. "
            f"This profile has dp and tp statistics; give a node more devices (e.g. "
            f"{mesh.nodes}x2) to search them.")


def plan_result(log_text: str) -> Optional[dict]:
    """The last JSON object a ``measure --json`` job printed (None before it printed one, or
    when the line is cut off)."""
    for line in reversed(log_text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                out = json.loads(line)
            except ValueError:
                continue
            if isinstance(out, dict) and "status" in out:
                return out
    return None


def job_result(store, job_id: int) -> Optional[dict]:
    """A ``measure --plan --json`` job's printed result, read from the end of its log (wide
    enough for a JSON line with a breakdown per device, which a 2,000-character tail cuts)."""
    from mcap.app import jobs
    jobs.reconcile(store, store.job(job_id))
    return plan_result(jobs.tail_of(jobs.log_path(store, job_id), 256_000))
