"""streams: IBM Streams on ykshm (the Streams system; it meets the shim only in `kube`) — the instance controller's backend (a lightweight SAM).

    errors      the submission errors: BundleError, AdlError, LogicalError, FetchError (one base)
    model       frozen dataclasses: Application (logical model), Operator, Port, HostPool,
                ParallelRegion, ConsistentRegionSpec, Pe
    bundle      a .sab (zip: bundleInfo.xml + the ADL inside tar/bundle.tar) -> Bundle
    adl         ADL XML (defusedxml) -> Application
    topology    logical -> physical operators: parallel regions replicated per channel (`op[c]`)
    fusion      FusionSpec (Job `fusion` + `threadingModel`), the automatic PE count, fuse / refuse
    aadl        one deterministic AADL document per PE (the runtime's `augmentedPE` schema), its content id
    aadlparts   what an AADL copies from the ADL (tuple types, shared objects, constants), rendered once
    fetch       bundle sources (file, http + CA from a ConfigMap, github + token from a Secret), cache
    fetchpolicy where a bundle URL may lead (no loopback/link-local/metadata) and who gets a token

The instance controller (`ykshm streams`):

    main        `ykshm streams` command line -> controller
    controller  the process under trio: informers, the reconcile loop, submissions, Job status
    jobspec     a Job's spec read and checked (the seed's logical errors), PE options, resources table
    submission  fetch -> bundle -> ADL -> fuse -> AADLs -> the job's objects (idempotent)
    refuse      a parallel region's width changed (/scale): re-fuse, only touched PEs relaunch
    respec      a changed Job spec applied in place: only the PEs whose AADL or pod it changes relaunch
    repair      objects of a running job a user deleted (AADL ConfigMaps, HostPools, CRs, CRO) re-made
    events      the controller's events, rate-limited per object
    conditions  status conditions: the time stamp, one condition replaced by type
    reconcile   the pure plan: PEs, pods by launch count, restarts, connectivity, PE status
    restart     the seed's restart policy table, as data
    objects     the job's Kubernetes objects with deterministic names (PE pods: gang, placement)
    pepolicy    what a Job may put into its PE pods (hostPath, SYS_PTRACE, Secrets): the rest refused, named
    peobjects   what a PE runtime needs around its pod, as OpenStreams makes it: image, bootstrap,
                STREAMS_* env, volumes, probe; the PE Services, job ConfigMap, token Secret
    transportcert a job's self-signed transport certificate and key (TLSv1.2), kept in its job ConfigMap
    bundleserver the bundle endpoint PEs fetch from (`streams-api`, per-job token), in the controller
    nameservice the PEs' name service on `streams-api`: a job's name by id, PE endpoints, user
                endpoints (`usr-` Service ports), subscriptions, as OpenStreams answers them
    jobids      a job's id, given once at its first launch (`status.jobId`): the AADLs' `jobId`
    repository  the bundle repository: a redis-server child (`streams-api` port 6379, hash `apps`,
                what OpenStreams' bootstrap HGETs), ACL: anonymous may only read, the controller writes
    pepeers     which job's PE pod a caller is, by its address (OpenStreams' runtime sends no token)
    kubecalls   where each kind lives, idempotent writes, events (imported as `kube`)
    crds        the packaged CRDs (crds/ links to deploy/crds) and `--install-crds`
    operators   the cr-operators: a Deployment + Service per job (PodOperators) or one supervised
                local `ykshm cr-operator` process per job (Supervisor)
    croobjects  the cr-operator's Deployment, Service (`streams-JOB-consistentregion-api`) and SA
    operator_process  `ykshm cr-operator`: regions/ on Kubernetes (CR status, PE/pod monitors)
    pesim_process     `ykshm pe-sim --job`: plays a job's PEs, following its operator's address
    pepod       `ykshm pe-sim` as a PE pod's process (the runtime image in sim-cluster): AADL, bundle,
                liveness file, data connections by Service name, connectivity, region notifications
    region_main       the command lines of `ykshm cr-operator` and `ykshm pe-sim`
    appgen      ADL and .sab files in the compiler's format, for tests, the bench and the demo

Pure modules (all but fetch, controller, submission, refuse, respec, repair, events, kubecalls, crds, operators,
bundleserver, nameservice, repository, pepod, main, region_main and the *_process modules) do no I/O.

Consistent regions (`ykshm cr-operator`, one per job):

    regions/    the consistent-region operator: state machine, notifications, REST, metrics (see its map)
"""
