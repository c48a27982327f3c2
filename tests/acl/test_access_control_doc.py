"""docs/ACCESS_CONTROL.md's broker.conf and plain_acl.yml start a broker as written, and the doc's
client example is served by it (and refused without its credentials). Only what a test machine
must change is changed: the ACL file's path (a temp file), and loopback for listenHost and
brokerIP1 (tests never listen beyond 127.0.0.1); the ports are the test's free ones."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mqcore.broker.conf import read_properties
from tests.support.processes import BrokerProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "ACCESS_CONTROL.md"
NAMESRV_IN_DOC = "127.0.0.1:9876"

pytestmark = pytest.mark.timeout(120)


def _block(text: str, lang: str, after: str) -> str:
    m = re.search(rf"```{lang}\n(.*?)^```", text[text.index(after):], re.S | re.M)
    assert m, f"no ```{lang} block after {after!r} in {DOC.name}"
    return m.group(1)


def test_the_documented_files_start_a_broker_that_serves_the_client_example(tmp_path):
    text = DOC.read_text(encoding="utf-8")
    conf = read_properties(_block(text, "properties", "## Turning it on"))
    acl_yml = _block(text, "yaml", "## The file")
    client = _block(text, "python", "## Clients")
    assert conf["aclEnable"] == "true" and conf["brokerAccessKey"] in acl_yml
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(acl_yml, encoding="utf-8")
    conf.update(plainAclFile=str(acl_file), listenHost="127.0.0.1", brokerIP1="127.0.0.1")
    with BrokerProcess(tmp_path / "store", conf=conf) as b:
        run = [sys.executable, "-c", client.replace(NAMESRV_IN_DOC, b.namesrv_addr)]
        done = subprocess.run(run, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "SEND_OK" in done.stdout, done.stdout
        # the same example without its credentials is refused: the file is in force
        unsigned = client.replace(NAMESRV_IN_DOC, b.namesrv_addr).replace(
            'access_key="RocketMQ", secret_key="12345678"', "")
        assert unsigned != client
        refused = subprocess.run([sys.executable, "-c", unsigned], capture_output=True, text=True, timeout=60,
                                 cwd=tmp_path)
        assert refused.returncode != 0 and "AclException" in refused.stderr, refused.stderr[-3000:]
