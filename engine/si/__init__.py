"""engine.si: the scheduler interface (SI) between the shim and the engine.

    protocol  message type names, enumerations, framing, `ProtocolError`
    messages  every SI message, both ways, as frozen structs; `parse` (the validation of
              what the shim sends), `read_engine` (what the shim receives), `to_si()`
    server    the engine's UNIX socket server under trio: connections, Ack/Error, routing by rmID

The shim (`shim_k8s`) builds `messages` and sends their `to_si()`, so each field is spelled
once for both sides.
"""
