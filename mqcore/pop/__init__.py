"""POP consumption, one implementation behind both protocols: the 5.x gRPC endpoint's
ReceiveMessage/AckMessage/ChangeInvisibleDuration and the remoting POP_MESSAGE,
ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME (and friends) of RocketMQ 5's broker.

``handle`` (the receipt handle format), ``arrivals`` (parked receives), ``journal`` (the
checkpoint and ack records in the revive topic that let invisibility and acks survive a
restart), ``service`` (the pop state, revive into the retry queue / DLQ). Below the broker
and the gRPC endpoint, beside nothing of theirs: each is handed the one ``PopService``.
"""
