"""kube: the Kubernetes API client every Kubernetes-facing role shares (shim, streams,
cr-operator, pe-sim): the one place they meet.

    client      a small Kubernetes API client on httpx (trio): kubeconfig and credentials,
                paged list, list/watch informers (410 relist), bind, events, errors
    store       one resource kind's local cache (an informer's store) and the relist diff
    args        the API-server and logging flags every Kubernetes-facing role shares

`kube` imports no role and never `simcluster`: it talks to any kube-apiserver.
"""
