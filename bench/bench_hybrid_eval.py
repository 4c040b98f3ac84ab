"""Hybrid plans predicted vs measured per device (issue 15 item 9; CAPTURE III-B/III-C).

    python bench/bench_hybrid_eval.py [--seed S] [--plans N] [--cases gpt4,gpt8,vgg4,vgg8]
                                      [--work DIR] [--out data/hybrid-eval-cpu.json]
                                      [--isolation stage|pipeline] [--compare OTHER.json]
    python bench/bench_hybrid_eval.py --load data/hybrid-eval-cpu.json [--work DIR] [--reprofile]
                                      [--repeats N]
    python bench/bench_hybrid_eval.py --figures   # bench/run.py's row, from data/hybrid-eval-cpu.json

Each model is profiled once with the command a user types, ``python -m mcap profile ...
--stages 8 --parallel dp,tp`` (engine hybrid for the pipeline-only runs and for the 2- and
4-way dp and tp runs: on 8 devices both degrees are profiled; ``--stages 4`` would give
degree 2 only, and then no dp4/tp4 stage could be predicted). Each case (model, devices G in
4 and 8) then measures hybrid plans on CPU stage processes (engine hybrid, one runner per
case) and compares each device's measured peak with ``HybridCosts(profile).peaks(plan)``
(default predictor).

The plans: the recommender's pick on 1xG (and 2x4 for G=8), ``L:dp8`` / ``L:tp8`` for G=8
(degree 8 is never profiled: the logarithmic fit of III-B3), and ``--plans`` more drawn by
``--seed`` from the plans of the L layers on G devices (power-of-two degrees), a quarter
each pipeline-only, with dp stages, with tp stages, and with both. Plans the profile itself
measured are left out. Nothing here was tuned on these plans; ``--load`` re-predicts the
stored measurements from the profiles in ``--work`` (after a predictor change) without
measuring again.

``--isolation stage`` (the default, issue 25) measures every device alone, rank by rank
over the slot processes there are (an 8-device plan on the 2-core VM: two ranks at a time),
the profile's runs included; ``pipeline`` runs each plan's devices together over gloo, as
the bundled ``data/hybrid-eval-cpu.json`` was measured. Both are recorded per result.
``--compare OTHER.json`` sets each plan's per-device peaks beside the same plan's in another
result (e.g. ranks alone against the devices together): plans and devices equal to the byte,
and every difference in bytes.

Prints per-device error p50/p90/max overall, per stage kind (pp/dp/tp) and per (kind,
degree), per case, and where the recommender's pick ranks among the measured plans by
measured peak. Writes the measurements, the predictions and the summary to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Optional

from mcap.core.evaluate import percentile
from mcap.core.capture.plan import HybridPlan, StageConfig, parse_mesh, parse_plan
from mcap.core.capture.predict import DEGREE_FITS, HybridCosts, recommend_mesh
from mcap.io import jsonio

GPT = "gpt:layers=8,hidden=128,heads=4,vocab=512,seq=64"  # 10 layers
VGG = "vgg11:image_size=32,hidden=512"  # 30 layers
BATCH, CHUNKS = 16, 2  # micro-batch 8: every degree up to 8 divides it
CASES = {"gpt4": ("gpt", GPT, 4), "gpt8": ("gpt", GPT, 8),
         "vgg4": ("vgg11", VGG, 4), "vgg8": ("vgg11", VGG, 8)}
PROFILE_DEVICES = 8  # profiles dp/tp at degrees 2 and 4 (mcap.workflow.capture.parallel)
CATEGORIES = ("pp", "dp", "tp", "mixed")
TARGET_P90 = 0.10
STARTED = time.time()


def profile_command(spec: str, devices: int, out: Path, store: Path,
                    isolation: str = "stage") -> list[str]:
    return ["profile", "--model", spec, "--stages", str(devices), "--batch-size", str(BATCH),
            "--chunks", str(CHUNKS), "--parallel", "dp,tp", "--store", str(store),
            "--out", str(out), "--isolation", isolation]


def category(plan: HybridPlan) -> str:
    kinds = {s.parallel for s in plan.stages}
    if kinds == {"pp"}:
        return "pp"
    if {"dp", "tp"} <= kinds:
        return "mixed"
    return "dp" if "dp" in kinds else "tp"


def random_plan(rng: random.Random, L: int, G: int, cat: str) -> HybridPlan:
    """One plan of ``cat`` (CATEGORIES): degrees a random power-of-two composition of G
    (at most 4 per stage: degree 8 is the whole mesh, added on its own), layers a random
    composition of L."""
    while True:
        degrees = [1] * G if cat == "pp" else []
        left = G
        while cat != "pp" and left:
            d = rng.choice([x for x in (1, 2, 4) if x <= left])
            degrees.append(d)
            left -= d
        if len(degrees) > L or (cat != "pp" and all(d == 1 for d in degrees)):
            continue
        allowed = {"pp": (), "dp": ("dp",), "tp": ("tp",), "mixed": ("dp", "tp")}[cat]
        kinds = [rng.choice(allowed) if d > 1 else "pp" for d in degrees]
        if cat == "mixed" and not {"dp", "tp"} <= set(kinds):
            continue
        cuts = sorted(rng.sample(range(1, L), len(degrees) - 1))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [L])]
        return HybridPlan(tuple(StageConfig(n, k, d) for n, k, d in zip(sizes, kinds, degrees)))


def profiled_plans(prof) -> set[str]:
    """The plans the profile measured itself (left out of the evaluation)."""
    out = {",".join(map(str, r.balance)) for r in prof.runs}
    for v in prof.variants:
        for r in v.runs:
            out.add(HybridPlan(tuple(StageConfig(n, v.parallel, v.degree)
                                     for n in r.balance)).text)
    return out


def choose_plans(prof, G: int, n: int, seed: int) -> list[tuple[str, str]]:
    """(plan text, why) for one case: the recommender's picks, degree 8, then the sample."""
    L = prof.model.num_layers
    picks = [(recommend_mesh(prof, parse_mesh(m)).plan.text, f"pick {m}")
             for m in ((f"1x{G}",) if G == 4 else ("1x8", "2x4"))]
    fixed = picks + ([(f"{L}:dp8", "degree 8"), (f"{L}:tp8", "degree 8")] if G == 8 else [])
    seen = profiled_plans(prof)
    out: list[tuple[str, str]] = []
    for text, why in fixed:
        if text not in {t for t, _ in out}:
            out.append((text, why))
    rng = random.Random(f"{seed}:{prof.model.spec}:{G}")
    per = {c: n // len(CATEGORIES) + (i < n % len(CATEGORIES)) for i, c in enumerate(CATEGORIES)}
    taken = {t for t, _ in out} | seen
    for cat in CATEGORIES:
        got = 0
        for _ in range(2000):
            if got == per[cat]:
                break
            text = random_plan(rng, L, G, cat).text
            if text not in taken:
                taken.add(text)
                out.append((text, "sample"))
                got += 1
    return out


def run_case(key: str, work: Path, store: Path, n: int, seed: int,
             isolation: str = "stage") -> dict:
    from mcap.cli.main import main as cli
    from mcap.core.types import Setup
    from mcap.runner import open_runner

    name, spec, G = CASES[key]
    path = work / f"{name}-cpu{PROFILE_DEVICES}-dptp.profile.json"
    cmd = profile_command(spec, PROFILE_DEVICES, path, store, isolation)
    started = time.monotonic()
    if not (path.exists() and path.stat().st_mtime > STARTED):  # once per model and bench run
        if cli(cmd) != 0:
            raise SystemExit(f"profiling failed: python -m mcap {' '.join(cmd)}")
    profiling_s = time.monotonic() - started
    prof = jsonio.load_profile(path)
    plans = choose_plans(prof, G, n, seed)
    rows = []
    with open_runner(spec, Setup(stages=G, batch_size=BATCH, chunks=CHUNKS, engine="hybrid"),
                     timeout=600, isolation=isolation) as runner:
        slots = len(runner.worker_pids)
        for text, why in plans:
            t = time.monotonic()
            run = runner.measure_plan(text)
            rows.append({"plan": text, "why": why, "status": run.status,
                         "measured": list(run.peaks or ()), "seconds": round(time.monotonic() - t, 2)})
            print(f"  {key} {text:<28} {run.status} {rows[-1]['seconds']:5.1f} s", flush=True)
        machine = runner.machine
    return {"case": key, "model": name, "spec": spec, "devices": G, "batch_size": BATCH,
            "chunks": CHUNKS, "profile_command": "python -m mcap " + " ".join(cmd),
            "profile_seconds": round(profiling_s, 1), "profile_file": path.name,
            "machine": machine.describe() if machine is not None else None,
            "isolation": isolation, "processes": slots, "plans": rows}


def remeasure(case: dict, repeats: int, isolation: Optional[str] = None) -> None:
    """Measure every plan of a case ``repeats`` more times, interleaved (all plans, then all
    again), into ``row["repeats"]``: how far a device's peak moves between identical runs."""
    from mcap.core.types import Setup
    from mcap.runner import open_runner
    with open_runner(case["spec"], Setup(stages=case["devices"], batch_size=case["batch_size"],
                                         chunks=case["chunks"], engine="hybrid"),
                     timeout=600, isolation=isolation or case.get("isolation", "pipeline")
                     ) as runner:
        for r in range(repeats):
            for row in case["plans"]:
                run = runner.measure_plan(row["plan"])
                row.setdefault("repeats", []).append(list(run.peaks or ()))
            print(f"  {case['case']}: repeat {r + 1} of {repeats} done", flush=True)


def spread(cases: list[dict]) -> dict:
    """Per device (max - min) / min over the first measurement and its repeats, by stage
    kind: the repeatability the errors are read against."""
    out: dict[str, list] = {"all": []}
    for case in cases:
        for row in case["plans"]:
            if row["status"] != "ok" or not row.get("repeats"):
                continue
            plan = parse_plan(row["plan"])
            stage_of = plan.device_stage()
            for d, m in enumerate(row["measured"]):
                seen = [m] + [rep[d] for rep in row["repeats"] if len(rep) > d]
                v = (max(seen) - min(seen)) / min(seen)
                kind = plan.stages[stage_of[d]].parallel
                out["all"].append(v)
                out.setdefault(f"kind {kind}", []).append(v)
                out.setdefault(f"case {case['case']}", []).append(v)
    return {k: {"n": len(v), "p50": percentile(v, 50), "p90": percentile(v, 90), "max": max(v),
                "moved": sum(x > 0 for x in v)} for k, v in out.items() if v}


def predict(case: dict, work: Path, degree_fit: str = "inverse") -> None:
    """Fill each plan's predicted per-device peaks from the case's profile; a plan the
    profile measured itself (``in_profile``: after --reprofile added runs) is left out of
    the errors."""
    prof = jsonio.load_profile(work / case["profile_file"])
    hc = HybridCosts(prof, degree_fit=degree_fit)
    seen = profiled_plans(prof)
    for row in case["plans"]:
        row["predicted"] = list(hc.peaks(parse_plan(row["plan"])))
        row["in_profile"] = row["plan"] in seen
    G = case["devices"]
    case["picks"] = {m: recommend_mesh(prof, parse_mesh(m)).plan.text
                     for m in ((f"1x{G}",) if G == 4 else ("1x8", "2x4"))}


def errors(cases: list[dict]) -> list[dict]:
    """One record per measured device: case, plan, stage kind and degree, signed error."""
    out = []
    for case in cases:
        for row in case["plans"]:
            if row["status"] != "ok" or row.get("in_profile"):
                continue
            plan = parse_plan(row["plan"])
            stage_of = plan.device_stage()
            for d, (p, m) in enumerate(zip(row["predicted"], row["measured"])):
                s = plan.stages[stage_of[d]]
                out.append({"case": case["case"], "model": case["model"], "plan": row["plan"],
                            "category": category(plan), "kind": s.parallel, "degree": s.degree,
                            "error": (p - m) / m})
    return out


def stats(errs: list[dict]) -> dict:
    a = [abs(e["error"]) for e in errs]
    return {"n": len(a), "p50": percentile(a, 50), "p90": percentile(a, 90), "max": max(a),
            "mean_signed": sum(e["error"] for e in errs) / len(errs)}


def summary(cases: list[dict]) -> dict:
    errs = errors(cases)
    groups: dict[str, list] = {"all": errs}
    for e in errs:
        groups.setdefault(f"kind {e['kind']}", []).append(e)
        groups.setdefault(f"{e['kind']}{e['degree']}" if e["degree"] > 1 else "pp1", []).append(e)
        groups.setdefault(f"case {e['case']}", []).append(e)
        groups.setdefault(f"model {e['model']}", []).append(e)
        groups.setdefault(f"plans {e['category']}", []).append(e)
    table = {k: stats(v) for k, v in groups.items()}
    ranks = {}
    for case in cases:
        ok = [r for r in case["plans"] if r["status"] == "ok"]
        order = sorted(ok, key=lambda r: max(r["measured"]))
        best = max(order[0]["measured"])
        for mesh, text in case["picks"].items():
            row = next((r for r in ok if r["plan"] == text), None)
            if row is None:
                continue
            ranks[f"{case['case']} {mesh}"] = {
                "plan": text, "rank": 1 + order.index(row), "of": len(order),
                "measured_peak": max(row["measured"]), "best_plan": order[0]["plan"],
                "best_peak": best, "above_best": max(row["measured"]) / best - 1}
    plans = sum(len(c["plans"]) for c in cases)
    moved = spread(cases)
    return {"plans": plans, "plans_ok": sum(r["status"] == "ok" for c in cases for r in c["plans"]),
            "in_profile": [r["plan"] for c in cases for r in c["plans"] if r.get("in_profile")],
            "errors": table, "pick_ranks": ranks, "target_p90": TARGET_P90, "spread": moved,
            "met": table["all"]["p90"] <= TARGET_P90}


def compare(cases: list[dict], other: dict) -> dict:
    """Each plan measured in both results: how many plans and devices read the same bytes,
    and each device that does not (its byte difference, this result minus the other)."""
    theirs = {(c["case"], r["plan"]): r for c in other["cases"] for r in c["plans"]
              if r["status"] == "ok"}
    out = {"plans": 0, "plans_equal": 0, "devices": 0, "devices_equal": 0, "differ": []}
    for case in cases:
        for row in case["plans"]:
            o = theirs.get((case["case"], row["plan"]))
            if row["status"] != "ok" or o is None:
                continue
            out["plans"] += 1
            out["plans_equal"] += row["measured"] == o["measured"]
            for d, (m, t) in enumerate(zip(row["measured"], o["measured"])):
                out["devices"] += 1
                out["devices_equal"] += m == t
                if m != t:
                    out["differ"].append({"case": case["case"], "plan": row["plan"],
                                          "device": d, "bytes": m - t})
    return out


def show(result: dict) -> None:
    s = result["summary"]
    print(f"\n{s['plans']} plans ({s['plans_ok']} ok); per-device |predicted - measured| / measured"
          + (f"; left out (the profile ran them): {', '.join(s['in_profile'])}"
             if s["in_profile"] else ""))
    print(f"{'group':<14} {'devices':>7} {'p50':>7} {'p90':>7} {'max':>7} {'mean signed':>12}")
    for k, v in s["errors"].items():
        print(f"{k:<14} {v['n']:>7} {v['p50']:>7.1%} {v['p90']:>7.1%} {v['max']:>7.1%} "
              f"{v['mean_signed']:>+12.1%}")
    print("\nrecommender's pick among the measured plans (by measured peak, 1 = lowest):")
    for k, v in s["pick_ranks"].items():
        print(f"  {k:<10} {v['plan']:<24} rank {v['rank']}/{v['of']}  "
              f"{v['measured_peak'] / 2**20:7.2f} MiB, best {v['best_plan']} "
              f"{v['best_peak'] / 2**20:.2f} MiB ({v['above_best']:+.1%})")
    if s.get("spread"):
        print("\nrepeatability: per device (max - min) / min over identical runs")
        for k, v in s["spread"].items():
            print(f"  {k:<12} {v['n']:>5} devices, {v['moved']:>4} moved: p50 {v['p50']:.1%} "
                  f"p90 {v['p90']:.1%} max {v['max']:.1%}")
    if result.get("compared"):
        c = result["compared"]
        print(f"\nagainst {c['with']} ({c['isolation']}): {c['plans_equal']}/{c['plans']} plans "
              f"and {c['devices_equal']}/{c['devices']} devices equal to the byte")
        for d in c["differ"]:
            print(f"  {d['case']} {d['plan']} device {d['device']}: {d['bytes']:+,} bytes")
    print(f"\ntarget: per-device p90 <= {s['target_p90']:.0%}: "
          f"{'met' if s['met'] else 'NOT met'} ({s['errors']['all']['p90']:.1%})")


BUNDLED = Path(__file__).resolve().parents[1] / "data" / "hybrid-eval-cpu.json"


def figures(quick: bool = False) -> list:
    """bench/run.py's row: the summary recomputed from the bundled result's measured and
    predicted per-device peaks (its profiles are not bundled, so its stored predictions;
    data/PROVENANCE.md). Pure: writes nothing; ``quick`` changes nothing."""
    from benchtable import Figure
    result = json.loads(BUNDLED.read_text())
    s = summary(result["cases"])
    e = s["errors"]
    kinds = ", ".join(f"{k} {e[f'kind {k}']['p90']:.1%}" for k in ("pp", "dp", "tp")
                      if f"kind {k}" in e)
    lowest = sum(v["rank"] == 1 for v in s["pick_ranks"].values())
    return [Figure(f"hybrid plans, predicted vs measured per-device peak ({BUNDLED.stem}: "
                   f"{s['plans']} plans on 4 and 8 CPU devices, measured {result['date']})",
                   f"p90 {e['all']['p90']:.1%} over {e['all']['n']} devices (p50 "
                   f"{e['all']['p50']:.1%}, max {e['all']['max']:.1%}); p90 by kind: {kinds}; "
                   f"the recommender's pick measured lowest in {lowest} of "
                   f"{len(s['pick_ranks'])} meshes", "p90 <= 10% (issue 15 item 9)")]


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--figures", action="store_true",
                    help="print bench/run.py's row only (reads the bundled result, writes nothing)")
    ap.add_argument("--quick", action="store_true", help="with --figures: the same (pure)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plans", type=int, default=12, help="sampled plans per case")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--work", type=Path, default=Path(".mcap/hybrid-eval"),
                    help="profiles and the store of this evaluation")
    ap.add_argument("--out", type=Path, default=Path("data/hybrid-eval-cpu.json"))
    ap.add_argument("--load", type=Path, default=None,
                    help="re-predict this result's measurements (no runs)")
    ap.add_argument("--reprofile", action="store_true",
                    help="with --load: profile again first (the store's runs are reused; "
                         "only runs a newer mcap adds are measured)")
    ap.add_argument("--repeats", type=int, default=0,
                    help="with --load: measure every plan this many more times (repeatability)")
    ap.add_argument("--isolation", choices=("stage", "pipeline"), default=None,
                    help="stage (default for new measurements): every device alone, rank by "
                         "rank; pipeline: each plan's devices together over gloo. With --load "
                         "--repeats: default the result's own")
    ap.add_argument("--compare", type=Path, default=None, metavar="OTHER.json",
                    help="set every plan's per-device peaks beside the same plan's in another "
                         "result of this bench (e.g. --isolation pipeline against stage)")
    ap.add_argument("--degree-fit", choices=DEGREE_FITS, default="inverse",
                    help="degrees above the profiled ones (mcap.core.capture.predict)")
    args = ap.parse_args(argv[1:])
    if args.figures:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchtable import show as show_figures
        show_figures(figures(args.quick))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    if args.load is not None:
        result = json.loads(args.load.read_text())
        for case in result["cases"]:
            path = args.work / case["profile_file"]
            if args.reprofile and (not path.exists() or path.stat().st_mtime < STARTED):
                from mcap.cli.main import main as cli
                spec = case["spec"]
                if cli(profile_command(spec, PROFILE_DEVICES, path,
                                       args.work / "store.sqlite",
                                       args.isolation or case.get("isolation",
                                                                  "pipeline"))) != 0:
                    raise SystemExit(f"profiling {spec} failed")
            if path.exists():
                predict(case, args.work, args.degree_fit)
            else:  # reprint the stored predictions (the profiles live in --work, not in data/)
                print(f"{path} not found: {case['case']} keeps its stored predictions")
            if args.repeats:
                remeasure(case, args.repeats, args.isolation)
        result["degree_fit"] = args.degree_fit
        result["predicted_by"] = "python bench/bench_hybrid_eval.py " + " ".join(argv[1:])
        if args.reprofile:
            result["reprofiled"] = datetime.date.today().isoformat()
    else:
        import torch
        result = {"schema": "mcap.bench.hybrid-eval/1",
                  "command": "python bench/bench_hybrid_eval.py " + " ".join(argv[1:]),
                  "date": datetime.date.today().isoformat(), "torch": torch.__version__,
                  "python": platform.python_version(), "host": platform.machine(),
                  "degree_fit": args.degree_fit, "isolation": args.isolation or "stage",
                  "cases": []}
        for key in args.cases.split(","):
            print(f"{key}: {CASES[key][1]} on {CASES[key][2]} devices", flush=True)
            result["cases"].append(run_case(key, args.work, args.work / "store.sqlite",
                                            args.plans, args.seed,
                                            args.isolation or "stage"))
            predict(result["cases"][-1], args.work, args.degree_fit)
            # each finished case is kept at once: a later failure loses nothing measured
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    result["summary"] = summary(result["cases"])
    if args.compare is not None:
        other = json.loads(args.compare.read_text())
        result["compared"] = {"with": str(args.compare),
                              "isolation": other.get("isolation", "pipeline"),
                              **compare(result["cases"], other)}
    show(result)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(sys.argv)
