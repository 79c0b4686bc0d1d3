"""`ykshm node-agent` (`ykshm sim-cluster --node-agent`): sim-cluster's node half against any API server.

sim-cluster is two things: an API server (`simcluster/`) and the kubelet of its nodes. This package
is the second one on its own: it talks to an API server only over HTTP, through a kubeconfig
(`kube/`'s client), so a real kube-apiserver (`ykshm realk8s run`) gets nodes and running pods,
and so does a sim-cluster. The kubelet's pieces themselves (`simcluster.kubelet`, `procpods`,
`podstatus`, `podenv`, `volumes`, `probes`, `podlogs`, `services`, the fork server and the
sandbox) are sim-cluster's, shared unchanged: they read and write a store, and `mirror` is one
over HTTP. sim-cluster keeps calling them in-process on its own store.

Modules (one concept each):

- `mirror`     informer caches read synchronously (the store calls the kubelet pieces make), pod
               status as merge PATCHes of pods/status (uid precondition, newest per pod), Events POSTed
- `nodes`      the nodes registered Ready (not-ready taint lifted), Leases in kube-node-lease renewed,
               status heartbeats
- `network`    process pods' addresses from a CIDR local on lo (the realk8s run's 10.244.1.0/24);
               ClusterIPs served as themselves
- `kubeletapi` the HTTPS endpoint kube-apiserver calls for `kubectl logs` (/containerLogs/...)
- `uidslot`   the agent's range of pod uids, a slot claimed machine-wide (flock), so two agents'
               pods (same addresses, other namespaces) never share a uid
- `agent`      the wiring: Kubelet + ProcPods + Service proxy on the mirror, TokenRequest tokens,
               graceful deletion confirmed once the processes are gone
- `main`       the CLI

Layering: imports `common`, `kube` (the client) and `simcluster` (the kubelet pieces); imports no
role, and nothing but `tools` and tests imports it (sim-cluster may not import `kube`).
"""
