"""bench/bench_stage_times.py's ``--replay``: a sample kept by ``--save`` is estimated again
with the current replay (``mcap.core.stagetime``) and its errors printed, without running
anything; a file that is not such a sample is refused with exit 2 and the reason, and
nothing in it is more than JSON numbers and texts. No process starts here."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from mcap.core.stagetime import Link, samples_per_second
from mcap.core.types import Setup, StageTimes

REPO = next(p for p in Path(__file__).resolve().parents if (p / "bench" / "run.py").is_file())
SCRIPT = REPO / "bench" / "bench_stage_times.py"
_spec = importlib.util.spec_from_file_location("bench_stage_times", SCRIPT)
bst = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bst)

SETUP = Setup(stages=2, batch_size=8, chunks=2)
LINK = Link(1e-4, 2e9, "gloo", 1, (1.0, 1.1))


def times(scale: float) -> list[dict]:
    def stage(f, b):
        return {"forward": [[f * scale] * 2] * 2, "backward": [[b * scale] * 2] * 2,
                "step": [0.001] * 2, "recv_bytes": 4096, "send_bytes": 4096,
                "other": [0.0005] * 2}
    return [stage(0.010, 0.020), stage(0.015, 0.030)]


def sample(tmp_path: Path, measured_over_estimate: dict) -> Path:
    rows = []
    for scale, ratio in measured_over_estimate.items():
        st = times(scale)
        got = samples_per_second([StageTimes(
            tuple(map(tuple, t["forward"])), tuple(map(tuple, t["backward"])), tuple(t["step"]),
            t["recv_bytes"], t["send_bytes"], tuple(t["other"])) for t in st], SETUP, LINK)
        rows.append({"balance": [1, 1], "estimated_status": "ok", "measured_status": "ok",
                     "measured_samples_per_second": got * ratio, "stage_times": st})
    rows.append({"balance": [1, 1], "estimated_status": "oom", "measured_status": "ok",
                 "measured_samples_per_second": 1.0, "stage_times": None})
    doc = {"model": "toy", "setup": asdict(SETUP), "repeats": 1, "seed": 0,
           "link": {"latency": LINK.latency, "bytes_per_second": LINK.bytes_per_second,
                    "how": LINK.how, "slots": LINK.slots},
           "corun": list(LINK.corun), "rows": rows}
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(doc))
    return path


def test_replay_reads_the_errors_of_the_kept_sample(tmp_path, capsys):
    # measured 1.25x and 0.8x the estimate: errors -20% and +25%; the oom row is skipped
    got = bst.replay(sample(tmp_path, {1.0: 1.25, 2.0: 0.8}))
    assert got["n"] == 2 and got["above"] == 1
    assert got["max"] == pytest.approx(25.0)
    assert "over 2" in capsys.readouterr().out


@pytest.mark.parametrize("text", [
    "[1, 2]", "{}", "not json", "[" * 200_000 + "]" * 200_000,
    json.dumps({"setup": {"stages": "os:system", "batch_size": 8, "chunks": 2,
                          "schedule": "gpipe"}, "link": {}, "rows": []}),
    json.dumps({"setup": asdict(SETUP), "corun": [float("nan")], "rows": [],
                "link": {"latency": 0, "bytes_per_second": 1e9, "how": "gloo", "slots": 1}}),
    json.dumps({"setup": {"stages": 2}, "link": {"latency": 1e400, "bytes_per_second": 1,
                                                 "how": "gloo", "slots": 1},
                "corun": [], "rows": []}),
])
def test_a_file_that_is_not_a_kept_sample_exits_2_with_the_reason(tmp_path, text):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    out = subprocess.run([sys.executable, str(SCRIPT), "--replay", str(bad)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "not a sample kept by --save" in out.stderr and "Traceback" not in out.stderr


def test_save_refuses_an_existing_file_before_running_anything(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("mine")
    out = subprocess.run([sys.executable, str(SCRIPT), "--save", str(kept)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "exists already" in out.stderr
    assert kept.read_text() == "mine"


def test_replay_reads_the_runs_own_times_together_when_kept(tmp_path, capsys):
    """Since session 5 a kept row also holds the stage times the run together recorded;
    replayed with fair sharing only they say what the replay itself leaves out."""
    path = sample(tmp_path, {1.0: 1.0})
    doc = json.loads(path.read_text())
    row = doc["rows"][0]
    row["together_times"] = times(1.0)
    fair = Link(LINK.latency, LINK.bytes_per_second, LINK.how, LINK.slots)
    own = samples_per_second([StageTimes(
        tuple(map(tuple, t["forward"])), tuple(map(tuple, t["backward"])), tuple(t["step"]),
        t["recv_bytes"], t["send_bytes"], tuple(t["other"])) for t in times(1.0)], SETUP, fair)
    path.write_text(json.dumps(doc))
    got = bst.replay(path)
    measured = row["measured_samples_per_second"]
    assert got["own_mean"] == pytest.approx(100 * (own - measured) / measured)
    assert got["own_mean"] > 0  # fair sharing alone is faster than with the co-run factors
    assert "own stage times together" in capsys.readouterr().out
    row["together_times"] = [{"forward": "os:system"}]
    path.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(SCRIPT), "--replay", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "together_times" in out.stderr
