//go:build tools

// The test control plane: the upstream programs, built from their Go modules at the versions
// pinned in go.mod (scripts/controlplane.sh builds them once per machine into a cache keyed by
// go.mod, go.sum and the Go version). Nothing here is our code: this file only names the mains.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
