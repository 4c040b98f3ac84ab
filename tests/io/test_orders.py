"""Action lists for the dashboard server without torch (mcap.io.orders): one child process
for several lists, each checked as data and the one asked for, kept for the process, and a
clear McapError when there is none."""
import json
import subprocess

import pytest

from mcap.core.errors import McapError
from mcap.io import orders
from mcap.runner.orders import generate, requests


@pytest.fixture(autouse=True)
def fresh():
    orders.forget()
    yield
    orders.forget()


def test_one_child_answers_several_schedules_with_torchs_own_lists(monkeypatch):
    calls = []
    real = subprocess.run
    monkeypatch.setattr(orders.subprocess, "run", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    wanted = [("gpipe", 2, 1, 4), ("zbv", 2, 2, 4), ("1f1b", 3, 1, 3), ("gpipe", 3, 1, 2)]
    got = orders.action_lists(wanted)
    assert got == tuple(generate(*r) for r in wanted)
    assert len(calls) == 1  # torch imported once for all of them
    # kept: asking again starts no child
    assert orders.action_list("zbv", 2, 2, 4) == generate("zbv", 2, 2, 4)
    assert len(calls) == 1


def test_a_request_torch_refuses_is_answered_without_a_child(monkeypatch):
    monkeypatch.setattr(orders.subprocess, "run", lambda *a, **k: pytest.fail("no child"))
    with pytest.raises(McapError, match="dualpipev with G=4, V=2, M=4: .*chunks 4 < 8"):
        orders.action_list("dualpipev", 4, 2, 4)
    got = orders.answers([("1f1b", 4, 1, 2)])
    assert isinstance(got[("1f1b", 4, 1, 2)], McapError)


class _Done:
    def __init__(self, rc=0, out=b"", err=b""):
        self.returncode, self.stdout, self.stderr = rc, out, err


def test_the_childs_json_is_data_checked_before_use(monkeypatch):
    cases = [
        (_Done(out=b"not json"), "is not JSON"),
        (_Done(out=b"[]"), "asked for 1 action lists"),
        (_Done(out=json.dumps([{"schedule": "gpipe"}]).encode()), "missing or has a bad field"),
        (_Done(out=json.dumps([{**_dict("gpipe", 2, 1, 2), "order": {"0": ["0F0", "0F0"],
                                                                    "1": []}}]).encode()),
         "runs 0F0 twice"),
        (_Done(out=json.dumps([_dict("gpipe", 2, 1, 3)]).encode()),
         "asked for the action list of gpipe with G=2, V=1, M=2, got gpipe with G=2, V=1, M=3"),
        (_Done(rc=2, err=b"error: torch refuses it"), "gpipe with G=2, V=1, M=2: torch refuses it"),
    ]
    for done, words in cases:
        orders.forget()
        monkeypatch.setattr(orders.subprocess, "run", lambda *a, _d=done, **k: _d)
        with pytest.raises(McapError, match=words):
            orders.action_list("gpipe", 2, 1, 2)


def test_a_timeout_is_said_and_not_kept(monkeypatch):
    def slow(*a, **k):
        raise subprocess.TimeoutExpired(a[0], k.get("timeout"))
    monkeypatch.setattr(orders.subprocess, "run", slow)
    with pytest.raises(McapError, match="took over 5 s"):
        orders.action_list("gpipe", 2, 1, 2, timeout=5)
    assert ("gpipe", 2, 1, 2) not in orders._KEPT


def test_the_command_line_takes_several_schedules():
    assert requests(["gpipe", "4", "1", "4", "8", "1", "2", "zbv", "2", "2", "4"]) == \
        [("gpipe", 4, 1, 4), ("gpipe", 8, 1, 2), ("zbv", 2, 2, 4)]
    for bad in (["4", "1", "4"], ["gpipe", "4", "1"], ["gpipe"], []):
        with pytest.raises(ValueError):
            requests(bad)


def _dict(name, g, v, m):
    from mcap.core.schedules.actions import to_dict
    return to_dict(generate(name, g, v, m))
