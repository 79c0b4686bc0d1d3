"""engine.si: the scheduler interface (SI) between the shim and the engine.

    protocol   message type names, enumerations, framing, `ProtocolError`
    messages   every SI message, both ways: the facade to import them by
    requests   what the shim sends, as frozen structs with `to_si()`
    parse      a received dict -> a request, every field checked (the engine's entrance)
    responses  what the engine sends, as frozen structs; `read_engine` (the shim's entrance)
    server     the engine's UNIX socket server under trio: connections, Ack/Error, routing

The shim (`shim_k8s`) builds `messages` and sends their `to_si()`, so each field is spelled
once for both sides.
"""
