"""``python -m mcap export``: write a stored profile or sweep to a JSON file again.

    python -m mcap export --store .mcap/store.sqlite --profile 3 --out vgg.profile.json

``profile`` and ``sweep`` save their result in the store before writing ``--out``; when
that final write fails (a full disk, a folder removed meanwhile), their message names this
command, which writes the same file from the store without measuring anything. ``--out``
is checked as for every command (``mcap.io.outputs``).
"""
from __future__ import annotations


from mcap.cli import args as argtypes


def register(sub) -> None:
    p = sub.add_parser("export", help="write a stored profile or sweep to mcap.profile/1 or "
                                      "mcap.sweep/1 JSON",
                       description="Write a profile or sweep saved in the store to a file "
                                   "(the ids are printed by profile and sweep).")
    p.add_argument("--store", default=None, metavar="PATH", type=argtypes.in_path,
                   help="results store (default $MCAP_STORE or .mcap/store.sqlite)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--profile", type=argtypes.positive_int, metavar="ID", help="stored profile id")
    which.add_argument("--sweep", type=argtypes.positive_int, metavar="ID", help="stored sweep id")
    p.add_argument("--without-timelines", action="store_true",
                   help="leave out the runs' memory timelines (every op's bytes, kept for the "
                        "schedules' op model): a sweep compared with predictions needs only "
                        "its peaks, in a tenth of the bytes")
    p.add_argument("--out", required=True, type=argtypes.out_path, metavar="FILE.json",
                   help="the file to write (never the store, a folder or a file of another "
                        "kind; an existing file of the same schema is replaced)")
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from mcap.core.errors import McapError
    from mcap.io import jsonio
    from mcap.io.outputs import check_out, write_checked
    from mcap.store import Store
    from mcap.store.opening import check_path, resolve_path

    kind = "profile" if args.profile is not None else "sweep"
    stored_id = args.profile if kind == "profile" else args.sweep
    store_path = resolve_path(args.store)
    if check_path(store_path, owner=False):  # a folder, a FIFO, a device, a link: named
        raise McapError(f"store {store_path} does not exist" if not store_path.exists()
                        else f"store {store_path} is empty: it holds no {kind}")
    check_out(args.out, f"mcap.{kind}/1", store=store_path)
    # Read-only: export changes nothing, and a store on a read-only mount can be exported.
    with Store(store_path, read_only=True) as store:
        obj = store.load_profile(stored_id) if kind == "profile" else store.load_sweep(stored_id)
    if args.without_timelines:
        obj = without_timelines(obj)
    try:
        write_checked(args.out, jsonio.dumps(obj), f"mcap.{kind}/1", store=store_path)
    except OSError as exc:
        raise McapError(f"could not write {args.out}: {exc.strerror or exc}") from None
    print(f"{kind} {stored_id} ({obj.model.spec}, {len(obj.runs)} runs) -> {args.out}")
    return 0


def without_timelines(obj):
    """A profile or sweep whose runs keep their peaks and seconds but no memory timeline."""
    import dataclasses
    runs = tuple(r if r.times is None else dataclasses.replace(
        r, times=tuple(dataclasses.replace(t, memory=()) for t in r.times)) for r in obj.runs)
    return dataclasses.replace(obj, runs=runs)


__all__ = ["register", "cmd_export", "without_timelines"]
