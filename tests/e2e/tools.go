//go:build tools

// Package tools pins the Kubernetes components the end-to-end suite builds from their Go
// modules; build-k8s.sh compiles them. There is no Go code of loadext's here.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
