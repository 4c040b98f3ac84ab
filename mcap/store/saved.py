"""Profiles and sweeps in the store: saved in one transaction each, their runs linked to
the runs recorded as they finished rather than copied (``Store.save_profile``,
``load_profile``, ``save_sweep``, ``load_sweep`` and their listings)."""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

from mcap.core import consistency, fields
from mcap.core.capture import merging
from mcap.core.errors import McapError, StoreError
from mcap.core.types import Profile, Run, Sweep
from mcap.store import profileextra
from mcap.store import records as rec
from mcap.store.records import Study, Summary


class Saved:
    """The profiles and sweeps of a ``Store`` (a mixin over ``Connection`` and ``Runs``)."""

    # --- profiles and sweeps ----------------------------------------------------------

    def save_profile(self, profile: Profile, name: Optional[str] = None) -> int:
        """Store a profile (statistics and runs) in one transaction; returns its id.

        A merged profile (``mcap.core.capture.merging``, ``profile --merge-to``) is kept in the
        study of its merged model, but its runs are the real model's runs, measured and
        recorded in the real model's study as they finished: they are linked there, over
        the real layers, not copied into the merged study (:meth:`_merged_runs_home`)."""
        stats = profile.stats
        n = profile.model.num_layers
        consistency.check("profile", profile.model, profile.setup, profile.runs,
                          fields.Reader(f"profile of {profile.model.spec[:200]!r}", McapError))
        if len(stats.mem_isolated) != n or len(stats.mem_added) != n:
            raise McapError(f"profile of {profile.model.spec!r} has {len(stats.mem_isolated)} "
                            f"mem_isolated and {len(stats.mem_added)} mem_added values but "
                            f"the model has {n} layers")
        with self._write() as conn:
            study = self._get_or_create_study(conn, profile.model, profile.setup)
            machine = self._machine_key(conn, profile.machine)
            home, runs = self._merged_runs_home(conn, profile) or (study, profile.runs)
            run_ids = self._reuse_or_insert(conn, home, runs, "profile", machine)
            cur = conn.execute(
                "INSERT INTO profiles (study_id, name, mem_isolated, mem_added, extra, created, "
                "machine) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (study.id, name, rec.dumps(list(stats.mem_isolated)),
                 rec.dumps(list(stats.mem_added)), profileextra.profile_extra_to_json(profile),
                 time.time(), machine))
            conn.executemany("INSERT INTO profile_runs (profile_id, position, run_id) "
                             "VALUES (?, ?, ?)",
                             [(cur.lastrowid, i, r) for i, r in enumerate(run_ids)])
            return cur.lastrowid

    def load_profile(self, profile_id: int) -> Profile:
        with self._read() as conn:
            row = conn.execute("SELECT study_id, mem_isolated, mem_added, extra, machine "
                               "FROM profiles WHERE id = ?", (int(profile_id),)).fetchone()
            if row is None:
                raise McapError(f"store {self.path} has no profile {profile_id}")
            r = rec.reader(self.path, "profiles", int(profile_id))
            study = self._study_row(conn, rec.row_id(row[0], r, "study_id"))
            runs = self._linked_runs(conn, "profile_runs", "profile_id", profile_id)
            machine = self._machine_row(conn, row[4])
        stats = fields.stats(fields.loads(row[1], r, "mem_isolated"),
                             fields.loads(row[2], r, "mem_added"), r, study.model.num_layers)
        extra, variants, press = profileextra.profile_extra_from_json(
            row[3], study.model.num_layers, r)
        profile = Profile(study.model, study.setup, stats, runs, extra, machine=machine,
                          variants=variants, press=press)
        sizes = merging.sizes_of(profile)
        if sizes is not None and any(sum(r.balance) != len(sizes) for r in runs):
            # linked from the real model's study (save_profile): back over merged layers
            try:
                runs = tuple(r if sum(r.balance) == len(sizes) else
                             dataclasses.replace(r, balance=merging.contract(r.balance, sizes))
                             for r in runs)
            except McapError as exc:
                raise StoreError(f"store {self.path}: profile {profile_id}'s runs do not fit "
                                 f"its merged layers: {exc}") from None
            profile = dataclasses.replace(profile, runs=runs)
        consistency.check("profile", profile.model, profile.setup, profile.runs, r)
        return profile

    def _merged_runs_home(self, conn, profile: Profile) -> Optional[tuple[Study, tuple[Run, ...]]]:
        """Where a merged profile's runs are stored: (the real model's study, the runs over
        its real layers), or None for an unmerged profile.

        The profiling runs of a merged profile are measured as partitionings of the real
        layers and recorded in the real model's study (``workflow.profiling.profile``), where
        resuming, reuse and every listing of runs find them; the merged model's study holds
        the profile only (its model: nothing builds a merged spec). Without the real study in
        this store (a merged profile saved elsewhere), or when its layers do not merge into
        the profile's, the runs stay with the profile's study as before."""
        sizes = merging.sizes_of(profile)
        if sizes is None:
            return None
        row = conn.execute(f"SELECT {rec.STUDY_COLUMNS} FROM studies WHERE key = ?",
                           (rec.study_key(merging.real_spec(profile), profile.setup),)).fetchone()
        if row is None:
            return None
        real = rec.study_from_row(row)
        try:
            if merging.merged_model(real.model, sizes) != profile.model:
                return None
            runs = tuple(dataclasses.replace(r, balance=merging.expand(r.balance, sizes))
                         for r in profile.runs)
        except McapError:
            return None
        return real, runs

    def list_profiles(self) -> tuple[Summary, ...]:
        return self._summaries("profiles", "profile_runs", "profile_id")

    def save_sweep(self, sweep: Sweep, name: Optional[str] = None) -> int:
        """Store a sweep (many measured partitionings) in one transaction; returns its id."""
        consistency.check("sweep", sweep.model, sweep.setup, sweep.runs,
                          fields.Reader(f"sweep of {sweep.model.spec[:200]!r}", McapError))
        with self._write() as conn:
            study = self._get_or_create_study(conn, sweep.model, sweep.setup)
            machine = self._machine_key(conn, sweep.machine)
            run_ids = self._reuse_or_insert(conn, study, sweep.runs, "sweep", machine)
            cur = conn.execute("INSERT INTO sweeps (study_id, name, extra, created, machine) "
                               "VALUES (?, ?, ?, ?, ?)",
                               (study.id, name, rec.extra_to_json(sweep.extra), time.time(),
                                machine))
            conn.executemany("INSERT INTO sweep_runs (sweep_id, position, run_id) "
                             "VALUES (?, ?, ?)",
                             [(cur.lastrowid, i, r) for i, r in enumerate(run_ids)])
            return cur.lastrowid

    def load_sweep(self, sweep_id: int) -> Sweep:
        with self._read() as conn:
            row = conn.execute("SELECT study_id, extra, machine FROM sweeps WHERE id = ?",
                               (int(sweep_id),)).fetchone()
            if row is None:
                raise McapError(f"store {self.path} has no sweep {sweep_id}")
            study = self._study_row(conn, rec.row_id(
                row[0], rec.reader(self.path, "sweeps", int(sweep_id)), "study_id"))
            runs = self._linked_runs(conn, "sweep_runs", "sweep_id", sweep_id)
            machine = self._machine_row(conn, row[2])
        consistency.check("sweep", study.model, study.setup, runs,
                          rec.reader(self.path, "sweeps", int(sweep_id)))
        return Sweep(study.model, study.setup, runs,
                     rec.extra_from_json(row[1], rec.reader(self.path, "sweeps", int(sweep_id))),
                     machine=machine)

    def list_sweeps(self) -> tuple[Summary, ...]:
        return self._summaries("sweeps", "sweep_runs", "sweep_id")

    def _linked_runs(self, conn, link: str, column: str, owner: int) -> tuple[Run, ...]:
        cols = ", ".join("r." + c.strip() for c in rec.RUN_COLUMNS.split(","))
        rows = conn.execute(f"SELECT {cols} FROM {link} l JOIN runs r ON r.id = l.run_id "
                            f"WHERE l.{column} = ? ORDER BY l.position", (int(owner),)).fetchall()
        layers = self._layer_counts(conn, {row[1] for row in rows})
        return tuple(rec.run_record_from_row(row, self.path, layers.get(row[1])).run
                     for row in rows)

    def _summaries(self, table: str, link: str, column: str) -> tuple[Summary, ...]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT t.id, t.name, s.spec, s.setup, "
                f"(SELECT COUNT(*) FROM {link} l WHERE l.{column} = t.id), t.created, s.id, "
                f"m.record FROM {table} t JOIN studies s ON s.id = t.study_id "
                f"LEFT JOIN machines m ON m.key = t.machine ORDER BY t.id").fetchall()
        out = []
        for i, name, spec, setup, n, created, sid, machine in rows:
            r = rec.reader(self.path, table, i)
            out.append(Summary(i, r.str_(name, "name", nullable=True), r.str_(spec, "spec"),
                               rec.setup_from_json(setup, rec.reader(self.path, "studies", sid)),
                               n, rec.when(created, r, "created"), sid,
                               rec.machine_from_json(machine, rec.reader(self.path, table, i))))
        return tuple(out)

