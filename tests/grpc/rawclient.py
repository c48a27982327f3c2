"""A bare gRPC client of ``apache.rocketmq.v2.MessagingService`` for the tests that need to
send what no official client sends (malformed requests, handles kept across a restart)."""
from __future__ import annotations

import itertools

import grpc

from mqcore.grpc.protocol import load_protocol

d, s, g = load_protocol()
_ids = itertools.count()


class RawClient:
    def __init__(self, addr: str, client_id: str | None = "raw-client@1", *, root_cert: bytes | None = None,
                 meta: list | None = None):
        """``root_cert``: speak TLS, trusting that certificate (issued for localhost);
        ``meta``: more request headers (the 5.x ACL's signature)."""
        if root_cert is None:
            self.channel = grpc.insecure_channel(addr)
        else:
            self.channel = grpc.secure_channel(addr, grpc.ssl_channel_credentials(root_cert),
                                               options=[("grpc.ssl_target_name_override", "localhost")])
        self.stub = g.MessagingServiceStub(self.channel)
        self.meta = ([("x-mq-client-id", client_id)] if client_id else []) + list(meta or [])

    def close(self) -> None:
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, name: str, request, timeout: float = 10):
        return getattr(self.stub, name)(request, metadata=self.meta, timeout=timeout)

    def send(self, topic: str, body: bytes = b"x", namespace: str = "", **system):
        m = d.Message(topic=d.Resource(name=topic, resource_namespace=namespace), body=body)
        m.system_properties.message_id = system.pop("message_id", f"01RAW{next(_ids):029d}")
        for k, v in system.items():
            setattr(m.system_properties, k, v)
        return self.call("SendMessage", s.SendMessageRequest(messages=[m]))

    def receive(self, topic: str, group: str, *, batch: int = 16, invisible_ms: int = 30_000, polling_ms: int = 1000,
                namespace: str = "", tag: str = "*", sql: str | None = None):
        fe = d.FilterExpression(type=d.SQL, expression=sql) if sql is not None else \
            d.FilterExpression(type=d.TAG, expression=tag)
        req = s.ReceiveMessageRequest(group=d.Resource(name=group, resource_namespace=namespace), batch_size=batch,
                                      filter_expression=fe)
        req.message_queue.topic.name = topic
        req.message_queue.topic.resource_namespace = namespace
        req.invisible_duration.FromMilliseconds(invisible_ms)
        req.long_polling_timeout.FromMilliseconds(polling_ms)
        responses = list(self.call("ReceiveMessage", req, timeout=polling_ms / 1000 + 10))
        status = next(r.status for r in responses if r.HasField("status"))
        return status, [r.message for r in responses if r.HasField("message")]

    def ack(self, topic: str, group: str, message) -> object:
        req = s.AckMessageRequest(group=d.Resource(name=group), topic=d.Resource(name=topic))
        req.entries.add(message_id=message.system_properties.message_id,
                        receipt_handle=message.system_properties.receipt_handle)
        return self.call("AckMessage", req)

    def change_invisible(self, topic: str, group: str, message, invisible_ms: int):
        req = s.ChangeInvisibleDurationRequest(group=d.Resource(name=group), topic=d.Resource(name=topic),
                                               receipt_handle=message.system_properties.receipt_handle,
                                               message_id=message.system_properties.message_id)
        req.invisible_duration.FromMilliseconds(invisible_ms)
        return self.call("ChangeInvisibleDuration", req)
