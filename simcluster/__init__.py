"""`ykshm sim-cluster`: a simulated kube-apiserver speaking the real list/watch protocol.

Modules (one concept each):

- `resources`  the served API resources, as data, and the per-server `Registry` CRDs add to
- `crd`        CustomResourceDefinitions: validation, defaults, the resources they define, conditions
- `structural` a CRD's structural schema: pruning, defaulting, validation (422 causes naming the field)
- `jsonpath`   the simple JSONPath of printer columns and scale paths
- `scale`      the /scale sub-resource: an autoscaling/v1 Scale over a CRD's replicas paths
- `gc`         deletion: finalizers, deletionTimestamp, propagation policies, the garbage collector
- `store`      objects, the global resourceVersion, bounded change history, watchers
- `priority`   PriorityClasses and the pods' Priority admission (priorityClassName -> spec.priority)
- `kinds`      Services (ClusterIP allocation), ServiceAccounts, Leases, PDBs; what a namespace gets
- `disruption` PodDisruptionBudgets: the budget arithmetic and the controller keeping their status
- `eviction`   the pods/eviction sub-resource (what `kubectl drain` posts), honouring budgets (429)
- `leases`     the simulated kubelet's node Leases in kube-node-lease, renewed every interval
- `apply`      server-side apply and managedFields (Update and Apply managers, conflicts, force)
- `fieldsets`  field sets in FieldsV1 form, list semantics from the schema
- `k8sschema`  the vendored Kubernetes 1.32 schemas (`k8s_openapi.json`) of the built-in kinds
- `timestamps` Time / MicroTime fields normalised to UTC `Z`
- `api`        routing and verbs: list/watch, create/get/update/patch/delete, binding, status
- `objects`    defaults, system metadata and validation (422 causes naming the field)
- `schema`     known fields, for `?fieldValidation=Strict|Warn`
- `errors`     Kubernetes API errors: an HTTP code plus a `Status` object
- `protobuf`   just enough of the Kubernetes protobuf encoding for kubectl's typed writes
- `patch`      merge, strategic-merge and JSON patch
- `selectors`  label and field selectors
- `tables`     meta.k8s.io Table output for `kubectl get`
- `discovery`  /api, /apis, resource lists, /version, /openapi/v2 and /openapi/v3
- `eventconv`  core/v1 <-> events.k8s.io/v1 Event
- `kubelet`    bound pods become Running, then Succeeded after `ykshm.io/run-seconds`; pod events
- `workload`   pods for the `yunikorn` scheduler from a file or `--demo`
- `faults`     opt-in fault injection on writes (`--fault-rate`): 500/429/409/504, for resilience tests
- `httpserver` HTTP/1.1 on trio + h11 with long-lived chunked watch streams
- `main`       the CLI
"""
