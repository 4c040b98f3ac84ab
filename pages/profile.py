"""Profile: launch ``python -m mcap profile`` (or ``sweep``) as a child process and follow it
live: runs done of total, the balance being measured, a growing table of per-run peaks,
and a cancel button. The job keeps running while you visit other pages."""
import streamlit as st

from mcap.app import jobs
from mcap.core.errors import McapError
from mcap.models.spec import KNOWN_MODELS, parse_spec, trusted, user_target
from mcap.core.setup import check_setup
from mcap.core import schedules as schedule_registry
from mcap.core.types import CHECKPOINTS, OPTIMIZERS, PRECISIONS, Setup
from mcap.runner.engines import get as get_engine, names as engine_names
from mcap.runner.executors import chosen_name, get as get_executor, names as executor_names
from pages._jobs import gpu_count, job_output, job_panel, setup_args
from pages._shared import error, restore_url, store


restore_url()
st.title("Profile")
s = store()
if s is None:
    st.stop()

gpus = gpu_count()
if gpus == 0:
    st.info("**No GPU on this machine:** each pipeline stage runs as its own CPU process, and its "
            "peak is the byte-exact peak of the PyTorch tensor memory that process holds — a device "
            "of its own, like a GPU.")
else:
    st.success(f"{gpus} CUDA device(s) found: stages can run on GPUs (device `cuda`).")

st.markdown("mCAP's incremental profiling (paper 3.1) measures L − G + 1 short training runs "
            "(2 iterations each; L layers in the model, G stages) on chosen partitionings and "
            "derives every layer's statistics.")
with st.form("profile-form"):
    a, b, c = st.columns(3)
    spec = a.text_input("Model spec", value="vgg11:image_size=32", key="profile-spec",
                        help="; ".join(f"{k.name}:" + ",".join(f"{p.name}={p.default}" for p in k.params)
                                       for k in KNOWN_MODELS.values())
                        + "; a Hugging Face architecture hf:gpt2, hf:bert, hf:llama, hf:t5, hf:vit, "
                          "hf:resnet (e.g. hf:gpt2:n_layer=6,seq=256; python -m mcap plan --model "
                          "hf:gpt2 --list-layers shows its layers)"
                        + "; or package.module:function")
    stages = b.number_input("Stages (devices)", 1, 64, value=4, key="profile-stages")
    command = c.selectbox("Command", ("profile", "sweep"), key="profile-command",
                          help="profile: mCAP's profiling runs; sweep: measure a seeded sample "
                               "of partitionings (or all)")
    a, b, c = st.columns(3)
    batch = a.number_input("Batch size", 1, 4096, value=32, key="profile-batch")
    chunks = b.number_input("Micro-batches", 1, 256, value=4, key="profile-chunks")
    schedule = c.selectbox("Schedule", schedule_registry.names(), key="profile-schedule",
                           help=" ".join(f"**{s.name}**: {s.help}."
                                         for s in schedule_registry.REGISTRY))
    a, b, c = st.columns(3)
    checkpoint = a.selectbox("Checkpoint", CHECKPOINTS)
    optimizer = b.selectbox("Optimizer", OPTIMIZERS)
    capacity_mib = c.number_input("Capacity per device (MiB, 0 for none)", 0, 10**7, value=0)
    a, b, _ = st.columns(3)
    precision = a.selectbox("Precision", PRECISIONS, key="profile-precision",
                            help="fp32; bf16-autocast (torch.autocast); bf16 (bf16 weights and "
                                 "activations, fp32 master weights and optimizer state)")
    virtual = b.number_input("Stages per device (interleaved schedules)", 1, 16, value=2,
                             key="profile-virtual",
                             help="used by the schedules that hold several stages per device "
                                  "(interleaved-1f1b, looped-bfs, interleaved-zb); zbv and "
                                  "dualpipev hold 2; the others 1")
    a, b, c = st.columns(3)
    engine = a.selectbox("Engine", engine_names(), format_func=lambda n: get_engine(n).label,
                         help=" ".join(f"**{n}**: {get_engine(n).help}." for n in engine_names()))
    device = b.selectbox("Device", ("cpu", "cuda") if gpus else ("cpu",))
    sample = c.number_input("Sweep: partitionings to sample (0 = all)", 0, 10**6, value=20)
    configured = chosen_name()  # $MCAP_EXECUTOR of this server, else local
    executor = st.selectbox(
        "Executor", executor_names(), index=executor_names().index(configured),
        format_func=lambda n: get_executor(n).label, key="profile-executor",
        help="where the stage-alone measurements run; this server's configuration is "
             f"**{configured}** ($MCAP_EXECUTOR; its options from their variables, "
             "docs/executors.md). " + " ".join(f"**{n}**: {get_executor(n).help}."
                                               for n in executor_names()))
    a, b = st.columns(2)  # CAPTURE (III-A): a profile that predicts other batch sizes and hybrid stages
    capture = a.checkbox("CAPTURE: profile at a quarter and a half of the batch size (--capture)",
                         key="profile-capture", help="the runs fit where the target batch size "
                         "would not; predictions at the target come from the line (III-A2)")
    parallel = b.checkbox("CAPTURE: add 2- and 4-way dp and tp stages (--parallel dp,tp)",
                          key="profile-parallel", help="the statistics the Hybrid plans page "
                          "needs for data- and tensor-parallel stages (III-A1); every run of "
                          "the profile then runs on engine hybrid, whatever Engine says")
    submitted = st.form_submit_button("▶️ Start", type="primary", key="profile-start")

if submitted:
    try:
        parse_spec(spec)  # unknown model or parameter: McapError naming it
        if parallel:  # its pipeline-only runs too (mcap.workflow.capture.parallel.check_base_engine)
            engine = "hybrid"
        setup = Setup(stages=int(stages), batch_size=int(batch), chunks=int(chunks), schedule=schedule,
                      checkpoint=checkpoint, device=device, engine=engine, optimizer=optimizer,
                      capacity_bytes=int(capacity_mib) * 2**20 or None, precision=precision,
                      virtual_stages=schedule_registry.get(schedule).virtual_from_form(int(virtual)))
        check_setup(setup, engine_names())  # the rules the job would apply, before it starts
        get_engine(engine).check(setup, gpus)
        args = setup_args(spec, setup) + ["--out", job_output(s, command)]
        if (capture or parallel) and command != "profile":
            raise McapError("the CAPTURE options add profiling runs: choose the command profile")
        args += ["--capture"] * capture + ["--parallel", "dp,tp"] * parallel
        args += ["--executor", executor]
        if command == "sweep" and sample:
            args += ["--sample", str(int(sample))]
        if user_target(spec):  # user code: runs only after the confirmation below names it
            st.session_state["profile-confirm"] = (spec, command, args)
        else:
            st.session_state.pop("profile-confirm", None)
            job = jobs.launch(s, command, args)
            st.session_state["profile-job"] = job.id
            st.toast(f"Started {command} job {job.id}")
    except McapError as exc:
        error(exc)

pending = st.session_state.get("profile-confirm")
if pending is not None:
    spec_p, command_p, args_p = pending
    module, func = user_target(spec_p).split(":")
    st.warning(f"`{spec_p}` is a user model: mcap will **import the module `{module}` and call "
               f"its function `{func}`**, running that code on this machine with your rights. "
               f"Run it only if you wrote it or trust it.")
    if st.button(f"Run {module}:{func}", key="profile-confirm-run", type="primary"):
        try:  # confirmed: this spec, and only it, is trusted for this job
            args_t = [trusted(a) if a == spec_p else a for a in args_p]
            job = jobs.launch(s, command_p, args_t)
            st.session_state["profile-job"] = job.id
            st.session_state.pop("profile-confirm", None)
            st.toast(f"Started {command_p} job {job.id}")
        except McapError as exc:
            error(exc)

# The job to follow: this session's last, else the newest unfinished one (started earlier,
# from another tab, or before the page was left).
job_id = st.session_state.get("profile-job")
if job_id is None:
    running = jobs.active_jobs(s, "profile") + jobs.active_jobs(s, "sweep")
    job_id = running[0].id if running else None
    if job_id is not None:  # keep following it, even once another session cancels it
        st.session_state["profile-job"] = job_id
if job_id is not None:
    st.subheader(f"Job {job_id}")
    job_panel(s, job_id, key="profile")

recent = s.list_jobs()[:10]
if recent:
    with st.expander("Recent jobs"):
        st.dataframe([{"job": j.id, "command": " ".join(j.argv[:1]), "status": j.status,
                       "runs": f"{j.done}/{j.total}", "error": j.error or ""} for j in recent],
                     hide_index=True, key="recent-jobs")
