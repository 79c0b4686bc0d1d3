"""shim_k8s.streams: IBM Streams support (instance controller, consistent regions).

    regions/    the consistent-region operator: state machine, notifications, REST, metrics (see its map)
"""
