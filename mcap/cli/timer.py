"""``python -m mcap.cli.timer --serve``: the dashboard's timing child (``mcap.app.timing``).
One JSON request per stdin line ({"spec", "stages", "micro_batch", "device", "timeout",
"seed"}), one JSON answer per stdout line ({"balance": [...]} or {"error": "..."}). The spec
arrives as plain text, so a user spec is refused here too (data is data)."""
from __future__ import annotations

import json
import sys


def serve(lines=sys.stdin, out=sys.stdout) -> int:
    from mcap.core.errors import McapError
    from mcap.runner.timebalance import time_balance

    for line in lines:
        try:
            a = json.loads(line)
            balance = time_balance(a["spec"], a["stages"], a["micro_batch"],
                                   timeout=a.get("timeout", 1.0), device=a.get("device", "cpu"),
                                   seed=a.get("seed", 0))
            answer = {"balance": list(balance)}
        except McapError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # reported to the page as an error, never a traceback
            text = str(exc).splitlines()[0][:300] if str(exc) else ""
            answer = {"error": f"{type(exc).__name__}: {text}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else 2)
