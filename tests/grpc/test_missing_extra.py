"""The gRPC extra is optional: a broker asked to serve it without it says how to install it."""
from __future__ import annotations


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
