"""The shim's decisions, without I/O: Kubernetes objects and SI messages in, actions out.

`ShimCore` is fed by the trio driver (`shim_k8s.shim`) with watch events (`on_pod`, `on_node`,
`on_synced`), SI connection changes (`on_connect`, `on_disconnect`), engine messages (`on_si`)
and binding results (`on_bind_result`). Each call records actions; `take()` hands them over as
an `Actions` batch: SI messages to send in order, pods to bind, Kubernetes Events to post, pods to
delete or create, and the state transitions to log. Tests drive this object directly.

How it decides (reconciliation, not replay)
-------------------------------------------
The core keeps two views and only ever sends the difference:

- the cluster, from the informers: our pods (`PodInfo`), other schedulers' bound pods (their
  resources count as the node's occupied resource), nodes (`NodeInfo`);
- the engine, from what it accepted: applications, asks, allocations (key -> node) and nodes
  (with the resources, attributes and schedulability last sent; a label or taint change is an
  UPDATE, so the engine's node filter sees what `kubectl label` / `kubectl taint` did). A new
  SI connection (an engine restart) empties this view; recovery is simply reconciling against
  an empty engine.

What may be sent depends on the shim state (`shim_k8s.state`):

- New / Registered: nothing but RegisterResourceManager; changes are only cached.
- Recovering: applications of bound pods, nodes as CREATE_DRAIN (never schedulable), existing
  allocations, releases of allocations whose pods finished. No asks. A node is RECOVERED when the
  engine acknowledged the message carrying its allocations; when none is RECOVERING the core
  sends DRAIN_TO_SCHEDULABLE for every schedulable node, and on that acknowledgement the shim is
  Running. So no node is schedulable before every existing allocation is known to the engine.
- Running: everything, asks included.

Recovery waits until both informers have listed once and no binding is in flight, so a pod whose
bind the old engine started is recovered as bound (or re-asked if the bind failed), never bound
twice. A pod that already has `spec.nodeName` is never bound; a 409 from the binding is "already
bound". Pods bound to a node the engine does not know are held and become existing allocations
when the node appears (orphan adoption). A bound pod whose existing allocation the engine refuses
(its application was rejected) counts as occupied resource on its node, like other schedulers'
pods, so the node is never over-committed. Gang applications get YuniKorn's placeholder pods
(`placeholder_pods`) when their first pending pod is asked for.

Modules (one concept each; each is functions of a `ShimCore`)
-------------------------------------------------------------
    coordinator   `ShimCore`: the caches, the engine view, the `on_*` inputs and `take()`
    registration  registration and recovery: connection, RegisterResourceManager, Acks
    configuration the ConfigMaps' configuration on the SI: in the registration, UpdateConfiguration,
                  the engine's answer back to `shim_k8s.configmaps.ConfigMapSource`
    tasks         applications and tasks: pods -> applications, asks, existing allocations
    nodes         nodes: CREATE/UPDATE/drain/DECOMISSION, other schedulers' occupation
    binding       allocations -> bindings, binding results, releases (preemption victims
                  deleted, their end confirmed) and rejections
    placeholders  gang scheduling: placeholder pods, Reserving until they are placed
    podevents     YuniKorn's pod events (Scheduling, PodUnschedulable, PodBindSuccessful, ...)
    batch         the SI messages of one `take()`, in the order the engine needs
    actions       `Actions`, `Bind`, `KubeEvent`, `PodStatus`: what the driver carries out
    engine_view   `EngineNode`, `EngineAllocation`: what the engine accepted
"""

from .actions import Actions, Bind, KubeEvent
from .coordinator import ShimCore
from .placeholders import placeholder_pods

__all__ = ["Actions", "Bind", "KubeEvent", "ShimCore", "placeholder_pods"]
