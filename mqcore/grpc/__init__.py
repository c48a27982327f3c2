"""The RocketMQ 5.x gRPC endpoint (``apache.rocketmq.v2.MessagingService``) in the broker.

Optional (``pip install 'mqcore[grpc]'``) and off unless ``grpcServerEnable=true``. The
endpoint serves the official 5.x clients over the broker's own store, topics, groups and
offsets; see ``docs/grpc.md``. Importing this package loads nothing heavy: ``server``
imports grpc and the protocol modules when an endpoint is built.
"""
