"""shim_k8s.streams: IBM Streams on ykshm — the instance controller's backend (a lightweight SAM).

    errors      the submission errors: BundleError, AdlError, LogicalError, FetchError (one base)
    model       frozen dataclasses: Application (logical model), Operator, Port, HostPool,
                ParallelRegion, ConsistentRegionSpec, Pe
    bundle      a .sab (zip: bundleInfo.xml + the ADL inside tar/bundle.tar) -> Bundle
    adl         ADL XML (defusedxml) -> Application
    topology    logical -> physical operators: parallel regions replicated per channel (`op[c]`)
    fusion      FusionSpec (Job `fusion` + `threadingModel`), the automatic PE count, fuse / refuse
    aadl        one deterministic AADL document per PE, and its content id
    fetch       bundle sources (file, http + CA from a ConfigMap, github + token from a Secret), cache

Pure modules (all but fetch) do no I/O and know nothing of Kubernetes.
"""
