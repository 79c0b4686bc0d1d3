"""kube: the Kubernetes API client every Kubernetes-facing role shares (shim, streams,
cr-operator, pe-sim, admission): the one place they meet.

    source      which configuration a role uses, in client-go's order: --api-server,
                --kubeconfig, in-cluster, $KUBECONFIG, ~/.kube/config
    incluster   the pod's ServiceAccount (token, ca.crt) and KUBERNETES_SERVICE_HOST/PORT
                ($YKSHM_ROOT in front of the path for sim-cluster's process pods)
    kubeconfig  kubeconfig files merged as client-go merges them; a user entry's credentials
    credentials static token, token file (re-read on change and after a 401), the httpx auth
                that retries a 401 once and then ends the role
    execplugin  exec credential plugins (client.authentication.k8s.io v1/v1beta1), cached
    config      KubeConfig: one API server's URL, TLS context, credentials; the httpx client
    errors      KubeError and its kinds (config, credentials, API status, 410 Gone)
    client      the API calls on httpx (trio): paged list, list/watch informers (410
                relist), bind, events, RawConnection for fast POSTs
    store       one resource kind's local cache (an informer's store) and the relist diff
    leaderelection  active/standby through a coordination.k8s.io/v1 Lease, client-go's
                semantics (lease duration, renew deadline, retry period) and the fence a
                leader checks before each write, and its watch of its own Lease
    lifeline    proof that a Lease holder's process has ended (a connection its kernel
                closed), so a standby takes over at once instead of a lease duration later
    args        the API-server and logging flags every Kubernetes-facing role shares; run_role

`kube` imports no role and never `simcluster`: it talks to any kube-apiserver.
"""
