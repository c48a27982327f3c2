"""mqcore's mqadmin ACL 2.0 commands (createUser, updateUser, deleteUser, getUser, listUser,
createAcl, updateAcl, deleteAcl, getAcl, listAcl) and Apache RocketMQ 5.3.3's, each run through
the same steps against its own fresh mqbroker with ACL 2.0 on (the same conf, the same Super
user): the same lines printed (the broker's address apart), the same users and rules stored,
and the refused steps refused by both (Apache's tool prints "command failed", mqcore's says the
broker's remark on stderr and exits 1).
"""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from mqcore.admin.cli import main as mqadmin_main
from tests.support import acl2
from tests.support.processes import BrokerProcess
from tests.support.reference5 import mqadmin5_batch

pytestmark = pytest.mark.timeout(300)

TOOLS_YML = f"accessKey: {acl2.SUPER[0]}\nsecretKey: {acl2.SUPER[1]}\n"


def _steps(ns: str, addr: str) -> list[tuple[list[str], str | None]]:
    """(argv, None) or (argv, the broker's remark of its refusal)."""
    b = ["-n", ns, "-b", addr]
    return [(["createUser", *b, "-u", "zoe", "-p", "zoePassword1", "-t", "Normal"], None),
            (["createUser", *b, "-u", "zoe", "-p", "zoePassword1"], "The user is existed"),
            (["createUser", "-n", ns, "-c", "DefaultCluster", "-u", "amy", "-p", "amyPassword1"], None),
            (["getUser", *b, "-u", "zoe"], None),
            (["getUser", *b, "-u", "nobody"], None),
            (["updateUser", *b, "-u", "zoe", "-s", "disable"], None),
            (["updateUser", *b, "-u", "amy", "-p", "amyPassword2"], None),  # one of -p, -t, -s a time, as Apache's
            (["updateUser", *b, "-u", "amy", "-t", "Super"], None),
            (["listUser", *b], None),
            (["listUser", *b, "-f", "zo"], None),
            (["listUser", *b, "-f", "zz"], None),
            (["createAcl", *b, "-s", "User:zoe", "-r", "Topic:zoe*,Group:zoeGroup", "-a", "Pub,Sub", "-d", "Allow",
              "-i", "127.0.0.1"], None),
            (["createAcl", *b, "-s", "User:zoe", "-r", "Topic:zoeSecret", "-a", "Pub", "-d", "Deny"], None),
            (["createAcl", "-n", ns, "-c", "DefaultCluster", "-s", "User:amy", "-r", "Topic:amy*", "-a", "Sub",
              "-d", "Allow"], None),
            (["createAcl", *b, "-s", "User:nobody", "-r", "Topic:x", "-a", "Pub", "-d", "Allow"],
             "The subject of User:nobody is not exist."),
            (["getAcl", *b, "-s", "User:zoe"], None),
            (["getAcl", *b, "-s", "User:nobody"], "The subject is not exist."),
            (["updateAcl", *b, "-s", "User:zoe", "-r", "Topic:zoeSecret", "-a", "Pub,Sub", "-d", "Allow",
              "-i", "10.0.0.0/8,127.0.0.1"], None),
            (["listAcl", *b], None),
            (["listAcl", *b, "-s", "zo", "-r", "Secret"], None),
            (["deleteAcl", *b, "-s", "User:zoe", "-r", "Topic:zoeSecret"], None),
            (["getAcl", *b, "-s", "User:zoe"], None),
            (["deleteAcl", *b, "-s", "User:zoe"], None),
            (["listAcl", *b, "-s", "zoe"], None),
            (["deleteUser", *b, "-u", "zoe"], None),
            (["listUser", *b], None),
            (["listAcl", *b], None)]


def _ours(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = mqadmin_main([*argv, "--accessKey", acl2.SUPER[0], "--secretKey", acl2.SUPER[1]], out)
    return rc, out.getvalue(), err.getvalue()


def test_auth_commands_print_and_store_what_apaches_do(tmp_path):
    with BrokerProcess(tmp_path / "apache" / "store", conf=dict(acl2.CONF)) as ba, \
            BrokerProcess(tmp_path / "ours" / "store", conf=dict(acl2.CONF)) as bo:
        steps = _steps(ba.namesrv_addr, ba.broker_addr)
        apache = mqadmin5_batch([argv for argv, _ in steps], home=tmp_path / "home", tools_yml=TOOLS_YML)
        ours = [_ours(argv) for argv, _ in _steps(bo.namesrv_addr, bo.broker_addr)]
        stored = [json.loads((root / "store" / "config" / "auth.json").read_text())
                  for root in (tmp_path / "apache", tmp_path / "ours")]
    assert len(apache) == len(ours) == len(steps)
    for (argv, refusal), want, (rc, got, err) in zip(steps, apache, ours, strict=True):
        if refusal is not None:
            assert "command failed" in want and refusal in want, (argv, want)
            assert rc == 1 and got == "" and refusal in err, (argv, rc, got, err)
            continue
        assert "Exception" not in want, (argv, want)
        assert rc == 0 and err == "", (argv, rc, err)
        assert got.replace(bo.broker_addr, "ADDR") == want.replace(ba.broker_addr, "ADDR"), \
            f"{argv[0]}: Apache's mqadmin:\n{want!r}\nmqcore's:\n{got!r}"
    assert stored[0] == stored[1]
    # and what the steps did is what the broker holds: zoe and her rules gone, amy a Super user
    # with her new password and her one rule
    assert sorted((u["username"], u["password"], u["userType"], u["userStatus"]) for u in stored[1]["users"]) == [
        ("amy", "amyPassword2", "Super", "enable"), (acl2.SUPER[0], acl2.SUPER[1], "Super", "enable")]
    assert [a["subject"] for a in stored[1]["acls"]] == ["User:amy"]
    assert "Topic:amy*" in ours[-1][1] and "[Sub]" in ours[-1][1] and "zoe" not in ours[-1][1]
