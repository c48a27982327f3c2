"""END_TRANSACTION (37): a producer's commit, rollback or "still unknown" for a half message.

The producer sends it oneway, so the answer is read only by a caller that sent it as a
request (tests, tools); it is RocketMQ's answer all the same. The work is the transaction
service's (``mqcore.broker.transaction``): this processor only decodes and answers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mqcore.broker.transaction import EndOutcome, TransactionService
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.headers import EndTransactionRequestHeader

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel
    from mqcore.remoting.command import RemotingCommand


class EndTransactionProcessor:
    """END_TRANSACTION, given the transaction service. A half message stored before
    ``rejectTransactionMessage`` was set is still ended, as on the Java broker."""

    def __init__(self, *, transactions: TransactionService) -> None:
        self.transactions = transactions

    def end(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        h = EndTransactionRequestHeader.from_command(request)
        result = self.transactions.end(h)
        if result.outcome is EndOutcome.PENDING:
            return None  # RocketMQ answers nothing for an unknown state
        if result.outcome is EndOutcome.ROLLED_BACK:
            # the Java broker's answer word for word: its response object starts with this
            # remark and only the code is changed to SUCCESS on a rollback
            return create_response(request, ResponseCode.SUCCESS, "not set any response code")
        if result.code == ResponseCode.SUCCESS:
            return create_response(request, ResponseCode.SUCCESS)
        return create_response(request, result.code, result.remark)
