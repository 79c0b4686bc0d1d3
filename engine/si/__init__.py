"""engine.si: the scheduler interface (SI) between the shim and the engine.

    protocol  message types, the JSON schema and its validation (`ProtocolError`), framing
    server    the engine's UNIX socket server under trio: connections, Ack/Error, routing by rmID

The shim (`shim_k8s`) imports `protocol` to speak the same schema.
"""
