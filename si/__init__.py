"""si: the scheduler interface (SI), the contract between the shim and the engine.

As YuniKorn keeps its scheduler-interface apart from core and shim, this package holds what
both sides must agree on and nothing either side owns: the roles import it, it imports no role
(only `common`). The engine's socket server is `engine.si_server`; the shim's connection is in
`shim_k8s.shim`.

    protocol    message type names, enumerations, framing (`encode`, `FrameDecoder`, trio
                send/receive), `ProtocolError`
    messages    every SI message, both ways: the facade to import them by
    requests    what the shim sends, as frozen structs with `to_si()`
    parse       a received dict -> a request, every field checked (the engine's entrance)
    responses   what the engine sends, as frozen structs; `read_engine` (the shim's entrance)
    resources   resources as dict[str, int]: SI conversion, add/sub/fits/share
    tags        the ask/allocation tag and node attribute names (`kubernetes.io/label/*`,
                `kubernetes.io/meta/*`, `ykshm.io/placement`, `ykshm.io/taints`, ...)
    placement   the placement tag's document: one validator (Kubernetes API rules) for the shim
                that builds it from a pod and the engine that receives it
    kubeschema  the Kubernetes API's field rules the validators share (label keys, int64, ...)
    requestevents  the request events' messages (YuniKorn's texts) and why an ask waits
    config      YuniKorn's ConfigMap keys the engine reads (extraConfig): defaults, the ykshm
                setting each becomes, when it takes effect; `log.*` levels

The shim builds `messages` and sends their `to_si()`, so each field is spelled once for both
sides; `docs/CONTRACTS.md` describes the wire format.
"""
