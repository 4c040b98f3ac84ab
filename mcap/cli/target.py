"""``--for TARGET`` of ``predict`` and ``recommend``: plan for a GPU from a CPU profile
(``mcap.core.forcuda``, issue 30).

    python -m mcap recommend --profile cpu.profile.json --stages 4 --for cuda        # = cuda:sm90
    python -m mcap predict   --profile cpu.profile.json --balance 16,3,5,6 --for cuda:sm80
    python -m mcap recommend --profile cpu.profile.json --stages 4 --for cuda:65MiB
    python -m mcap recommend --profile cpu.profile.json --stages 4 --for gpu.profile.json

A ``*.json`` target is a GPU profile (of any model, measured on that GPU): its own fit
(predictor ``workspace``) says what a stage pays once there and which of its layer kinds pay
it; kinds it does not hold keep ``forcuda.GEMM_KINDS``'s answer, and a fit that finds no
such term (its windows do not show one) leaves torch's sm90 defaults.
"""
from __future__ import annotations

from mcap.core.errors import McapError

HELP = ("predict for another device than the profile's: cuda (= cuda:sm90), cuda:smNN, "
        "cuda:SIZE (the workspace a stage pays once, e.g. cuda:65MiB) or a GPU profile "
        "(*.json) whose fit gives it; translates a CPU profile (mcap.core.forcuda)")


def add_option(p) -> None:
    p.add_argument("--for", dest="for_target", metavar="TARGET", default=None, help=HELP,
                   type=_target_text)


def _target_text(text: str) -> str:
    """An empty ``--for`` was taken as no target at all, silently (issue 38)."""
    import argparse
    if not text.strip():
        raise argparse.ArgumentTypeError("--for is empty; give cuda, cuda:smNN, cuda:SIZE or a "
                                         "GPU profile (*.json)")
    return text


def refuse(args, what: str) -> None:
    """``--for`` does not combine with ``what`` (hybrid plans, MPress, another batch size)."""
    if getattr(args, "for_target", None):
        raise McapError(f"--for {args.for_target} does not combine with {what}; it translates "
                        "a CPU profile's pipeline predictions at the profile's batch size")


def target_of(text: str, profile):
    from mcap.core import forcuda
    if not text.endswith(".json"):
        return forcuda.parse_target(text)
    from mcap.core import predictors
    from mcap.core.predictors.workspace import LIBRARY, PAID_BY
    from mcap.files import paths
    from mcap.io.jsonio import load_profile
    try:
        paths.checked(text, "--for")
    except paths.BadPath as exc:
        raise McapError(str(exc)) from None
    gpu = load_profile(text)
    if gpu.setup.device != "cuda":
        raise McapError(f"--for {text}: that profile was measured on {gpu.setup.device!r}, "
                        "not cuda; give a GPU profile, or cuda / cuda:smNN / cuda:SIZE")
    details = predictors.fit(gpu, "workspace").details
    if LIBRARY not in details:  # e.g. GPT: every stage starts with a block that pays it
        default = forcuda.parse_target("cuda")
        return forcuda.Target(text, default.arch, default.workspace, source=(
            f"{default.source} (the GPU profile's windows show no once-per-stage workspace "
            "to read: Listing 1.1 fits them as they are)"))
    paid = set(details.get(PAID_BY, []))
    # Kinds as the GPU file records them, else (older files) as this profile records its
    # layers of the same names (the same model).
    kind_of = {l.name: l.kind for l in profile.model.layers if l.kind}
    kind_of.update({l.name: l.kind for l in gpu.model.layers if l.kind})
    held = {kind_of[l.name] for l in gpu.model.layers if l.name in kind_of}
    if not held:
        raise McapError(f"--for {text}: neither that profile nor this one records the kinds "
                        "of its layers, so its fit cannot be matched to this profile's layers")
    kinds = {kind_of[l.name] for l in gpu.model.layers
             if l.name in kind_of and (kind_of[l.name] in paid or l.name in paid)}
    return forcuda.from_gpu_fit(text, details.get(LIBRARY, 0),
                                kinds | (forcuda.GEMM_KINDS - held))


def translate(costs, profile, args):
    """``costs`` of ``profile`` for ``--for`` (unchanged without it)."""
    text = getattr(args, "for_target", None)
    if not text:
        return costs
    from mcap.core import forcuda
    if getattr(args, "batch_size", None) not in (None, profile.setup.batch_size):
        refuse(args, f"--batch-size {args.batch_size} (the profile's is "
                     f"{profile.setup.batch_size})")
    return forcuda.for_cuda(costs, profile, target_of(text, profile))
