"""shim_k8s: the Kubernetes shim process (`ykshm shim`) and the simulated cluster it is tested on.

    main        `ykshm shim` command line (and `ykshm shim status`) -> shim.run
    shim        the process under trio: informers, the SI connection, binders, event posters;
                typed inputs to the core loop (`WatchBatch`, `SiReceived`, `BindResult`, ...)
    core/       `ShimCore`: the shim's decisions without I/O (Kubernetes objects and SI in,
                actions out), one module per concept (see its map)
    state       the shim's state machines: the scheduler shim, each node's recovery
    mapping     Kubernetes objects -> what the scheduler needs, by YuniKorn's conventions
    store       one resource kind's local cache (an informer's store) and the relist diff
    kubeclient  a small Kubernetes API client on httpx: list/watch, bind, events
    kubeargs    the API-server and logging flags every Kubernetes-facing role shares
    harness     real sim-cluster + engine + shim subprocesses for end-to-end tests and bench e2e
    simcluster/ `ykshm sim-cluster`: a simulated kube-apiserver (see its map)
    streams/    IBM Streams: `ykshm streams`, `ykshm cr-operator`, `ykshm pe-sim` (see its map)

The shim speaks SI through `engine.si.protocol` and shares the engine's pure helpers for
resources (`engine.resources`) and placement (`engine.predicates`, `engine.podaffinity`,
`engine.kubeschema`), nothing of its state.
"""
