// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3/etcdmain),
// built at the version k8s.io/kubernetes requires so the pair matches what Kubernetes tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
