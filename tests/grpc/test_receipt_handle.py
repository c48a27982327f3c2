"""Receipt handles: what the broker issues decodes back to the same fields; anything else is
refused with IllegalArgumentError (the endpoint answers INVALID_RECEIPT_HANDLE)."""
from __future__ import annotations

import pytest

from mqcore.errors import IllegalArgumentError
from mqcore.grpc.receipt import KIND_NORMAL, KIND_RETRY, ReceiptHandle


@pytest.mark.parametrize("kind", [KIND_NORMAL, KIND_RETRY])
def test_round_trip(kind):
    h = ReceiptHandle(kind, 3, 1234, 987_654_321, 1_795_000_000_000, 30_000, 2, "broker-a")
    assert ReceiptHandle.decode(h.encode()) == h
    assert h.deadline_ms == 1_795_000_030_000


@pytest.mark.parametrize("text", ["", "1", "garbage with spaces but not nine", "2 N 0 0 0 0 0 1 b",
                                  "1 Q 0 0 0 0 0 1 b", "1 N x 0 0 0 0 1 b", "1 N 0 -5 0 0 0 1 b",
                                  "1 N 0 0 0 0 0 1 ", "1 N 0 0 0 0 0 1 b extra"])
def test_foreign_handles_are_refused(text):
    with pytest.raises(IllegalArgumentError):
        ReceiptHandle.decode(text)


def test_enabled_without_the_extra_stops_with_the_install_hint(tmp_path):
    """grpcServerEnable=true in an environment without grpc: one clear line, exit status 1."""
    import subprocess
    import sys
    conf = tmp_path / "broker.conf"
    conf.write_text("grpcServerEnable=true\n")
    code = ("import sys; sys.modules['grpc'] = None; from mqcore.broker.cli import main; "
            f"sys.exit(main(['-c', {str(conf)!r}, '--store', {str(tmp_path / 'store')!r}, "
            "'--listen-port', '0', '--namesrv-port', '0']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'mqcore[grpc]'" in proc.stderr and "Traceback" not in proc.stderr
