"""streams.regions: the consistent-region operator of one Streams job (`ykshm cr-operator`).

    errors     why a region refuses a request: RegionError -> 400 / 404 / 409, raised before any change
    vocabulary the machine's enumerations (`RegionState`, `PeStatus`, ...), its events (inputs) and
               actions (outputs), as frozen data
    fsm        the region state machine (OpenStreams' rules, transitions as data), pure: events in,
               actions out; `Region`, `RegionSpec`
    docs       ConsistentRegion spec/status documents <-> `Region` (the operator-restart round trip)
    health     the health rule (every PE Full, its current pod Running; missing -> unknown), pure
    board      the notification board: the latest notification per PE per region, for polling
    udp        each notification as a UDP datagram to the PE's address, when it has one
    metrics    the 8 Prometheus metrics per job and region, on the operator's own CollectorRegistry
    operator   the operator core under trio: one queue and task per region, timers, the status
               writer and health source it is given (Kubernetes ones are wired by the caller)
    visibility waiting until the operator's watch has seen a write's resourceVersion (for the
               Kubernetes status writer: the seed's consistency rule)
    rest       the API under /api/consistentregion and /metrics: routes, handlers, the ASGI app
    listener   the API socket: hot PE requests (checkpoint, reset, notifications) answered
               directly through the ASGI app's handlers, everything else handed to hypercorn
    pesim      a PE simulator client (httpx under trio): plays a region's PEs against the REST API

Kubernetes is not imported here: the caller supplies the status writer, the health source and the
PE addresses (see operator.py), so everything is tested in-process with fakes and trio's MockClock.
"""
