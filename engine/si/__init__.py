"""engine.si: the scheduler interface (SI) between the shim and the engine.

    protocol  message type names, enumerations, framing, `ProtocolError`
    messages  the shim -> engine messages as frozen dataclasses; `parse` (the validation)
    server    the engine's UNIX socket server under trio: connections, Ack/Error, routing by rmID

The shim (`shim_k8s`) builds `messages` and sends their `to_si()`, so each field is spelled
once for both sides.
"""
