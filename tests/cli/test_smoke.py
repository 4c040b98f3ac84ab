import subprocess
import sys


def test_cli_without_command_exits_2():
    out = subprocess.run([sys.executable, "-m", "mcap"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "error" in out.stderr
