"""``python -m mcap.cli.timer SPEC STAGES MICRO DEVICE TIMEOUT``: torchgpipe's balance_by_time
in its own process for the dashboard (``mcap.app.searches``), printed as JSON. Bad input
exits 2 with one line, like the CLI."""
from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from mcap.core.errors import McapError
    try:
        spec, stages, micro, device, timeout = argv[1:6]
        from mcap.runner.timebalance import time_balance
        balance = time_balance(spec, int(stages), int(micro), device=device,
                               timeout=float(timeout))
    except McapError as exc:
        print(f"mcap: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"mcap: error: bad arguments {argv[1:]!r}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"balance": list(balance)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
