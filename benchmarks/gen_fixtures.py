#!/usr/bin/env python3
"""Generate kube-scheduler HTTP extender wire fixtures.

The bodies imitate what kube-scheduler's HTTPExtender puts on the wire:
Go encoding/json output of the k8s.io/kube-scheduler/extender/v1 types
(no json tags -> keys are the Go field names) wrapping k8s.io/api/core/v1
Pod/Node objects taken from the scheduler's informer cache:

  * compact JSON, struct fields in Go declaration order, map keys sorted,
    '<' '>' '&' escaped as \\u003c \\u003e \\u0026 (Go's HTML-safe default);
  * no "kind"/"apiVersion" on Pod/Node/NodeList (typed informers clear TypeMeta);
  * Nodes carry metadata.managedFields (the node informer keeps them); Pods carry
    them too by default, as schedulers up to ~1.35 send them (the pod-informer trim
    only took effect with kubernetes/kubernetes PR #137473); pass
    --trim-pod-managed-fields to imitate a newer scheduler;
  * zero metav1.Time inside conditions is emitted as null (lastProbeTime).

Usage:
  gen_fixtures.py                      # write the small fixtures into this script's folder
  gen_fixtures.py --out DIR            # write the small fixtures into DIR
  gen_fixtures.py --pretty             # indent the output (NOT wire-exact; for reading)
  gen_fixtures.py --trim-pod-managed-fields   # drop metadata.managedFields from Pods
  gen_fixtures.py --large DIR [--nodes 5000] [--victim-nodes 500]
                                       # write big benchmark bodies into DIR (keep them out of shared/)
"""

import argparse
import json
import sys
import uuid
from pathlib import Path

NS_UUID = uuid.UUID("6f1c2a52-8d0e-4b7e-9a51-3c5b1f0d7e21")


def uid(*parts):
    """Deterministic RFC 4122 UUID string (lower-case, like API server UIDs)."""
    return str(uuid.uuid5(NS_UUID, "/".join(parts)))


def hexid(*parts, n=32):
    return uuid.uuid5(NS_UUID, "hex/" + "/".join(parts)).hex[:n]


def M(d):
    """A Go map: encoding/json always sorts map keys."""
    return {k: d[k] for k in sorted(d)}


# ---------------------------------------------------------------- encoding


def go_json(obj, pretty=False):
    if pretty:
        s = json.dumps(obj, ensure_ascii=False, indent=2)
    else:
        s = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    # Go's json.Marshal escapes these even inside strings (HTML-safe mode).
    # They can only occur inside JSON strings, so a global replace is safe.
    return (
        s.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# ---------------------------------------------------------------- pods

T0 = "2025-11-03T09:41:27Z"


def kube_api_access_volume(suffix):
    return {
        "name": "kube-api-access-" + suffix,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def sa_mount(suffix):
    return {
        "name": "kube-api-access-" + suffix,
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }


DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


TRIM_POD_MANAGED_FIELDS = False


def pod_managed_fields(meta, spec, status, creator, status_writer):
    """Plausible managedFields of a pod: creator (Update) + status writer (status subresource)."""
    c = spec["containers"][0]
    cfields = {
        ".": {},
        "f:image": {},
        "f:imagePullPolicy": {},
        "f:name": {},
        "f:resources": {".": {}, **{("f:" + k): {("f:" + r): {} for r in v} for k, v in c["resources"].items()}},
        "f:terminationMessagePath": {},
        "f:terminationMessagePolicy": {},
    }
    for k in ("args", "env", "ports", "readinessProbe"):
        if k in c:
            cfields["f:" + k] = {}
    if any(m["name"] == "data" for m in c.get("volumeMounts", [])):
        cfields["f:volumeMounts"] = {
            ".": {},
            'k:{"mountPath":"/var/lib/ingest"}': {".": {}, "f:mountPath": {}, "f:name": {}},
        }
    sp = {
        "f:containers": {'k:{"name":"%s"}' % c["name"]: cfields},
        "f:dnsPolicy": {},
        "f:enableServiceLinks": {},
        "f:restartPolicy": {},
        "f:schedulerName": {},
        "f:securityContext": {},
        "f:terminationGracePeriodSeconds": {},
    }
    for k in ("hostname", "subdomain", "priorityClassName"):
        if k in spec:
            sp["f:" + k] = {}
    if any(v["name"] == "data" for v in spec["volumes"]):
        sp["f:volumes"] = {
            ".": {},
            'k:{"name":"data"}': {".": {}, "f:name": {}, "f:persistentVolumeClaim": {".": {}, "f:claimName": {}}},
        }
    md = {
        "f:labels": {".": {}, **{("f:" + k): {} for k in meta["labels"]}},
        "f:ownerReferences": {".": {}, 'k:{"uid":"%s"}' % meta["ownerReferences"][0]["uid"]: {}},
    }
    if "generateName" in meta:
        md["f:generateName"] = {}
    if "finalizers" in meta:
        md["f:finalizers"] = {".": {}, 'v:"%s"' % meta["finalizers"][0]: {}}
    out = [
        {
            "manager": creator,
            "operation": "Update",
            "apiVersion": "v1",
            "time": meta["creationTimestamp"],
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1({"f:metadata": md, "f:spec": sp}),
        }
    ]
    ann = {k for k in meta.get("annotations", {}) if k.startswith("cni.projectcalico.org/")}
    if ann:
        out.append(
            {
                "manager": "calico",
                "operation": "Update",
                "apiVersion": "v1",
                "time": meta["creationTimestamp"],
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1({"f:metadata": {"f:annotations": {".": {}, **{("f:" + k): {} for k in ann}}}}),
                "subresource": "status",
            }
        )
    if status_writer and status.get("conditions"):
        st = {
            "f:conditions": {
                ".": {},
                **{
                    ('k:{"type":"%s"}' % cd["type"]): {
                        ".": {},
                        "f:lastProbeTime": {},
                        "f:lastTransitionTime": {},
                        "f:observedGeneration": {},
                        **({"f:message": {}, "f:reason": {}} if "reason" in cd else {}),
                        "f:status": {},
                        "f:type": {},
                    }
                    for cd in status["conditions"]
                },
            }
        }
        if status.get("phase") == "Running":
            st.update(
                {
                    "f:containerStatuses": {},
                    "f:hostIP": {},
                    "f:hostIPs": {},
                    "f:observedGeneration": {},
                    "f:phase": {},
                    "f:podIP": {},
                    "f:podIPs": {".": {}, 'k:{"ip":"%s"}' % status["podIP"]: {".": {}, "f:ip": {}}},
                    "f:startTime": {},
                }
            )
        out.append(
            {
                "manager": status_writer,
                "operation": "Update",
                "apiVersion": "v1",
                "time": status["conditions"][-1]["lastTransitionTime"]
                if status_writer == "kube-scheduler"
                else "2025-11-03T08:00:13Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1({"f:status": st}),
                "subresource": "status",
            }
        )
    return out


def ingest_pod(with_failed_condition=False, best_effort=False):
    """The pod being scheduled (a StatefulSet replica), as the scheduler queue holds it."""
    name, ns = "ingest-0", "analytics"
    meta = {
        "name": name,
        "generateName": "ingest-",
        "namespace": ns,
        "uid": uid("pod", ns, name),
        "resourceVersion": "4471203",
        "generation": 1,
        "creationTimestamp": T0,
        "labels": M(
            {
                "app.kubernetes.io/name": "ingest",
                "apps.kubernetes.io/pod-index": "0",
                "controller-revision-hash": "ingest-6b8d9c5f7d",
                "statefulset.kubernetes.io/pod-name": name,
            }
        ),
        "annotations": M({"kubectl.kubernetes.io/default-container": "ingest"}),
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": "ingest",
                "uid": uid("sts", ns, "ingest"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if best_effort:
        resources = {}
    else:
        resources = {
            "limits": M({"cpu": "2", "memory": "2Gi", "example.com/rbd-iops": "200"}),
            "requests": M({"cpu": "500m", "memory": "1Gi", "example.com/rbd-iops": "200"}),
        }
    container = {
        "name": "ingest",
        "image": "registry.example.com/analytics/ingest:2.4.1",
        "args": ["--listen=:8080", "--data-dir=/var/lib/ingest"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "resources": resources,
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/ingest"}, sa_mount("7xk2d")],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    spec = {
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-ingest-0"}},
            kube_api_access_volume("7xk2d"),
        ],
        "containers": [container],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "hostname": name,
        "subdomain": "ingest",
        "schedulerName": "default-scheduler",
        "tolerations": DEFAULT_TOLERATIONS,
        "priorityClassName": "analytics-critical",
        "priority": 1000000,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    status = {"phase": "Pending"}
    if with_failed_condition:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "observedGeneration": 1,
                "status": "False",
                "lastProbeTime": None,  # zero metav1.Time -> null
                "lastTransitionTime": "2025-11-03T09:41:28Z",
                "reason": "Unschedulable",
                "message": (
                    "0/3 nodes are available: 1 node(s) lack free RBD IOPS, "
                    "2 Insufficient cpu. preemption: 0/3 nodes are available: "
                    "1 Preemption is not helpful for scheduling, 2 No preemption "
                    "victims found for incoming pod."
                ),
            }
        ]
    status["qosClass"] = "BestEffort" if best_effort else "Burstable"
    if not TRIM_POD_MANAGED_FIELDS:
        meta["managedFields"] = pod_managed_fields(meta, spec, status, "kube-controller-manager", "kube-scheduler")
    return {"metadata": meta, "spec": spec, "status": status}


def running_pod(
    name,
    ns,
    node,
    owner,
    labels,
    cpu_req,
    mem_req,
    cpu_lim=None,
    mem_lim=None,
    priority_class=None,
    priority=0,
    pod_ip="10.244.1.23",
    host_ip="10.20.0.12",
    image="registry.example.com/batch/report:1.8.0",
    container="main",
    started="2025-11-03T08:00:11Z",
):
    """A bound, running pod as found in the scheduler's NodeInfo (a preemption victim)."""
    sa_suffix = hexid("sa", ns, name, n=5)
    limits = {}
    if cpu_lim:
        limits["cpu"] = cpu_lim
    if mem_lim:
        limits["memory"] = mem_lim
    res = {}
    if limits:
        res["limits"] = M(limits)
    res["requests"] = M({"cpu": cpu_req, "memory": mem_req})
    qos = "Guaranteed" if (cpu_lim == cpu_req and mem_lim == mem_req) else "Burstable"
    meta = {
        "name": name,
        "generateName": owner["generateName"],
        "namespace": ns,
        "uid": uid("pod", ns, name),
        "resourceVersion": owner["rv"],
        "generation": 1,
        "creationTimestamp": "2025-11-03T07:59:58Z",
        "labels": M(labels),
        "annotations": M(
            {
                "cni.projectcalico.org/containerID": hexid("cid", ns, name, n=32) * 2,
                "cni.projectcalico.org/podIP": pod_ip + "/32",
                "cni.projectcalico.org/podIPs": pod_ip + "/32",
            }
        ),
        "ownerReferences": [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["name"],
                "uid": uid(owner["kind"], ns, owner["name"]),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if owner["kind"] == "Job":
        meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    spec = {
        "volumes": [kube_api_access_volume(sa_suffix)],
        "containers": [
            {
                "name": container,
                "image": image,
                "resources": res,
                "volumeMounts": [sa_mount(sa_suffix)],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "OnFailure" if owner["kind"] == "Job" else "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "nodeName": node,
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": DEFAULT_TOLERATIONS,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    spec["priority"] = priority
    spec["enableServiceLinks"] = True
    spec["preemptionPolicy"] = "PreemptLowerPriority"

    def cond(t, ts):
        return {"type": t, "observedGeneration": 1, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}

    status = {
        "observedGeneration": 1,
        "phase": "Running",
        "conditions": [
            cond("PodReadyToStartContainers", "2025-11-03T08:00:10Z"),
            cond("Initialized", "2025-11-03T07:59:58Z"),
            cond("Ready", "2025-11-03T08:00:13Z"),
            cond("ContainersReady", "2025-11-03T08:00:13Z"),
            cond("PodScheduled", "2025-11-03T07:59:58Z"),
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": "2025-11-03T07:59:58Z",
        "containerStatuses": [
            {
                "name": container,
                "state": {"running": {"startedAt": started}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": image,
                "imageID": image.split(":")[0] + "@sha256:" + hexid("img", image, n=32) * 2,
                "containerID": "containerd://" + hexid("ctr", ns, name, n=32) * 2,
                "started": True,
                "allocatedResources": M({"cpu": cpu_req, "memory": mem_req}),
                "resources": res,
                "volumeMounts": [
                    {
                        "name": "kube-api-access-" + sa_suffix,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "readOnly": True,
                        "recursiveReadOnly": "Disabled",
                    }
                ],
            }
        ],
        "qosClass": qos,
    }
    if not TRIM_POD_MANAGED_FIELDS:
        meta["managedFields"] = pod_managed_fields(meta, spec, status, "kube-controller-manager", "kubelet")
    return {"metadata": meta, "spec": spec, "status": status}


def victims():
    """Victim pods chosen by the scheduler's dry run, per candidate node."""
    report = running_pod(
        "report-builder-29361420-8xk4n",
        "batch",
        "ceph2",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "report-builder-29361420",
            "generateName": "report-builder-29361420-",
            "rv": "4469950",
        },
        {
            "batch.kubernetes.io/controller-uid": uid("Job", "batch", "report-builder-29361420"),
            "batch.kubernetes.io/job-name": "report-builder-29361420",
            "controller-uid": uid("Job", "batch", "report-builder-29361420"),
            "job-name": "report-builder-29361420",
        },
        cpu_req="3",
        mem_req="6Gi",
        cpu_lim="3",
        mem_lim="6Gi",
        pod_ip="10.244.1.23",
        host_ip="10.20.0.12",
    )
    redis = running_pod(
        "redis-cache-2",
        "cache",
        "ceph3",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "redis-cache",
            "generateName": "redis-cache-",
            "rv": "4470012",
        },
        {
            "app.kubernetes.io/name": "redis-cache",
            "apps.kubernetes.io/pod-index": "2",
            "controller-revision-hash": "redis-cache-7cf5d9b8c4",
            "statefulset.kubernetes.io/pod-name": "redis-cache-2",
        },
        cpu_req="1",
        mem_req="4Gi",
        mem_lim="4Gi",
        priority_class="cache-standard",
        priority=1000,
        pod_ip="10.244.2.41",
        host_ip="10.20.0.13",
        image="registry.example.com/cache/redis:7.4.2",
        container="redis",
    )
    spark = running_pod(
        "etl-nightly-exec-3",
        "batch",
        "ceph3",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "etl-nightly",
            "generateName": "etl-nightly-exec-",
            "rv": "4470388",
        },
        {
            "batch.kubernetes.io/job-name": "etl-nightly",
            "job-name": "etl-nightly",
            "app.kubernetes.io/component": "executor",
        },
        cpu_req="2",
        mem_req="8Gi",
        cpu_lim="4",
        mem_lim="8Gi",
        pod_ip="10.244.2.57",
        host_ip="10.20.0.13",
        image="registry.example.com/batch/etl:3.1.0",
        container="executor",
    )
    # Victims are listed most important first (higher priority first).
    return {
        "ceph2": {"Pods": [report], "NumPDBViolations": 0},
        "ceph3": {"Pods": [redis, spark], "NumPDBViolations": 1},
    }


# ---------------------------------------------------------------- nodes

IMAGES = [
    ("quay.io/ceph/ceph", "v19.2.3", 522183311),
    ("docker.io/rook/ceph", "v1.17.7", 318744012),
    ("quay.io/cephcsi/cephcsi", "v3.14.2", 495122731),
    ("docker.io/calico/node", "v3.30.3", 158731302),
    ("docker.io/calico/cni", "v3.30.3", 94302117),
    ("registry.k8s.io/kube-proxy", "v1.34.2", 30924488),
    ("registry.k8s.io/sig-storage/csi-provisioner", "v5.2.0", 32519041),
    ("registry.k8s.io/sig-storage/csi-node-driver-registrar", "v2.13.0", 9101842),
    ("registry.k8s.io/coredns/coredns", "v1.12.1", 22384805),
    ("registry.example.com/analytics/ingest", "2.4.1", 87311920),
    ("registry.k8s.io/pause", "3.10", 320368),
]


def node_images(i):
    out = []
    for j, (repo, tag, size) in enumerate(IMAGES):
        if repo.endswith("/ingest") and i % 2 == 1:
            continue  # image locality differs per node
        out.append(
            {
                "names": [repo + "@sha256:" + hexid("digest", repo, tag, n=32) * 2, repo + ":" + tag],
                "sizeBytes": size + 17 * j,
            }
        )
    out.sort(key=lambda im: -im["sizeBytes"])  # kubelet reports largest first
    return out


def fields_v1(d):
    """managedFields' FieldsV1 tree: '.' first, then sorted keys (opaque to the scheduler)."""
    if not isinstance(d, dict):
        return d
    keys = sorted(d, key=lambda k: (k != ".", k))
    return {k: fields_v1(d[k]) for k in keys}


def node(name, idx, ip, zone, control_plane=False, attached=None):
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "storage.example.com/ceph-osd": "true",
        "topology.kubernetes.io/zone": zone,
    }
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = ""
        labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
    if idx < 256:
        pod_cidr = "10.244.%d.0/24" % idx
    else:
        pod_cidr = "10.%d.%d.0/24" % (100 + idx // 256, idx % 256)
    annotations = {
        "csi.volume.kubernetes.io/nodeid": json.dumps(
            {"rook-ceph.cephfs.csi.ceph.com": name, "rook-ceph.rbd.csi.ceph.com": name}, separators=(",", ":")
        ),
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
        "node.alpha.kubernetes.io/ttl": "0",
        "projectcalico.org/IPv4Address": ip + "/24",
        "projectcalico.org/IPv4IPIPTunnelAddr": "192.168.%d.%d" % (idx // 256 % 256, idx % 256 or 1),
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    cond_types = ["NetworkUnavailable", "MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    kube_lbls = {
        ("f:" + k): {}
        for k in labels
        if k
        not in (
            "node-role.kubernetes.io/control-plane",
            "node.kubernetes.io/exclude-from-external-load-balancers",
            "storage.example.com/ceph-osd",
            "topology.kubernetes.io/zone",
        )
    }
    kube_lbls["."] = {}
    mf = [
        {
            "manager": "kubeadm",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-06-12T14:02:51Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(
                {
                    "f:metadata": {
                        "f:annotations": {"f:kubeadm.alpha.kubernetes.io/cri-socket": {}},
                        "f:labels": (
                            {
                                "f:node-role.kubernetes.io/control-plane": {},
                                "f:node.kubernetes.io/exclude-from-external-load-balancers": {},
                            }
                            if control_plane
                            else {}
                        ),
                    }
                }
            ),
        },
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-06-12T14:03:20Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(
                {
                    "f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                    "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"%s"' % pod_cidr: {}}},
                }
            ),
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-06-12T14:02:49Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(
                {
                    "f:metadata": {
                        "f:annotations": {".": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                        "f:labels": kube_lbls,
                    }
                }
            ),
        },
        {
            "manager": "kubectl-label",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-06-13T08:15:02Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(
                {
                    "f:metadata": {
                        "f:labels": {"f:storage.example.com/ceph-osd": {}, "f:topology.kubernetes.io/zone": {}}
                    }
                }
            ),
        },
        {
            "manager": "calico-node",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-10-28T11:20:44Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(
                {
                    "f:metadata": {
                        "f:annotations": {
                            "f:projectcalico.org/IPv4Address": {},
                            "f:projectcalico.org/IPv4IPIPTunnelAddr": {},
                        }
                    },
                    "f:status": {
                        "f:conditions": {
                            'k:{"type":"NetworkUnavailable"}': {
                                ".": {},
                                "f:lastHeartbeatTime": {},
                                "f:lastTransitionTime": {},
                                "f:message": {},
                                "f:reason": {},
                                "f:status": {},
                                "f:type": {},
                            }
                        }
                    },
                }
            ),
            "subresource": "status",
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-11-03T09:40:03Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(
                {
                    "f:metadata": {"f:annotations": {"f:csi.volume.kubernetes.io/nodeid": {}}},
                    "f:status": {
                        "f:allocatable": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}},
                        "f:capacity": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}},
                        "f:conditions": {
                            ('k:{"type":"%s"}' % t): {
                                "f:lastHeartbeatTime": {},
                                "f:lastTransitionTime": {},
                                "f:message": {},
                                "f:reason": {},
                                "f:status": {},
                            }
                            for t in cond_types[1:]
                        },
                        "f:features": {".": {}, "f:supplementalGroupsPolicy": {}},
                        "f:images": {},
                        "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}},
                        "f:runtimeHandlers": {},
                        **({"f:volumesAttached": {}, "f:volumesInUse": {}} if attached else {}),
                    },
                }
            ),
            "subresource": "status",
        },
    ]
    spec = {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}
    hb = "2025-11-03T09:40:03Z"
    tr = "2025-10-28T11:19:58Z"

    def ncond(t, s, reason, msg, hb_=hb, tr_=tr):
        return {
            "type": t,
            "status": s,
            "lastHeartbeatTime": hb_,
            "lastTransitionTime": tr_,
            "reason": reason,
            "message": msg,
        }

    status = {
        "capacity": M(
            {
                "cpu": "32",
                "ephemeral-storage": "936820460Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "131841352Ki",
                "pods": "110",
            }
        ),
        "allocatable": M(
            {
                "cpu": "31500m",
                "ephemeral-storage": "863362654054",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "129744200Ki",
                "pods": "110",
            }
        ),
        "conditions": [
            ncond(
                "NetworkUnavailable",
                "False",
                "CalicoIsUp",
                "Calico is running on this node",
                hb_="2025-10-28T11:20:44Z",
                tr_="2025-10-28T11:20:44Z",
            ),
            ncond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ncond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ncond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ncond("Ready", "True", "KubeletReady", "kubelet is posting ready status", tr_="2025-10-28T11:20:09Z"),
        ],
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},  # capital P is the real tag
        "nodeInfo": {
            "machineID": hexid("machine", name),
            "systemUUID": str(uuid.uuid5(NS_UUID, "sysuuid/" + name)).upper(),
            "bootID": uid("boot", name),
            "kernelVersion": "6.8.0-88-generic",
            "osImage": "Ubuntu 24.04.3 LTS",
            "containerRuntimeVersion": "containerd://1.7.28",
            "kubeletVersion": "v1.34.2",
            "kubeProxyVersion": "",  # deprecated; kubelet leaves it empty, Go still emits it
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": node_images(idx),
    }
    if attached:
        status["volumesInUse"] = [a["name"] for a in attached]
        status["volumesAttached"] = attached
    status["runtimeHandlers"] = [
        {"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}},
        {"name": "runc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}},
    ]
    status["features"] = {"supplementalGroupsPolicy": True}
    meta = {
        "name": name,
        "uid": uid("node", name),
        "resourceVersion": str(4470000 + idx * 37),
        "creationTimestamp": "2025-06-12T14:02:49Z",
        "labels": M(labels),
        "annotations": M(annotations),
        "managedFields": mf,
    }
    return {"metadata": meta, "spec": spec, "status": status}


def ceph_nodes():
    rbd = "kubernetes.io/csi/rook-ceph.rbd.csi.ceph.com^0001-0009-rook-ceph-0000000000000002-" + uid("vol", "a")
    return {
        "ceph1": node("ceph1", 0, "10.20.0.11", "rack-a", control_plane=True),
        "ceph2": node("ceph2", 1, "10.20.0.12", "rack-b", attached=[{"name": rbd, "devicePath": ""}]),
        "ceph3": node("ceph3", 2, "10.20.0.13", "rack-c"),
    }


def node_list(nodes):
    # v1.NodeList as built by HTTPExtender: empty TypeMeta/ListMeta -> {"metadata":{},"items":[...]}
    return {"metadata": {}, "items": nodes}


# ---------------------------------------------------------------- extender/v1 bodies


def extender_args(pod, node_objs=None, names=None):
    # ExtenderArgs{Pod, Nodes, NodeNames}: no omitempty, nil pointers -> null
    return {"Pod": pod, "Nodes": node_list(node_objs) if node_objs is not None else None, "NodeNames": names}


def filter_result(nodes=None, names=None, failed=None, unresolvable=None, error=""):
    # ExtenderFilterResult as a Go extender would emit it (all keys, nil -> null).
    return {
        "Nodes": node_list(nodes) if nodes is not None else None,
        "NodeNames": names,
        "FailedNodes": M(failed) if failed is not None else None,
        "FailedAndUnresolvableNodes": M(unresolvable) if unresolvable is not None else None,
        "Error": error,
    }


def meta_victims(full):
    return M(
        {
            n: {"Pods": [{"UID": p["metadata"]["uid"]} for p in v["Pods"]], "NumPDBViolations": v["NumPDBViolations"]}
            for n, v in full.items()
        }
    )


def small_fixtures():
    pod = ingest_pod()
    pod_retry = ingest_pod(with_failed_condition=True)
    nodes = ceph_nodes()
    order = ["ceph2", "ceph3", "ceph1"]  # the scheduler does not sort; order rotates per cycle
    full_victims = M(victims())
    out = {}
    out["filter-names.json"] = extender_args(pod, names=order)
    out["filter-nodes.json"] = extender_args(pod, node_objs=[nodes[n] for n in order])
    out["prioritize-names.json"] = extender_args(pod, names=["ceph3", "ceph1", "ceph2"])
    out["prioritize-nodes.json"] = extender_args(pod, node_objs=[nodes[n] for n in ["ceph3", "ceph1", "ceph2"]])
    out["preempt-meta.json"] = {
        "Pod": pod_retry,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": meta_victims(full_victims),
    }
    out["preempt-full.json"] = {"Pod": pod_retry, "NodeNameToVictims": full_victims, "NodeNameToMetaVictims": None}
    out["bind.json"] = {
        "PodName": pod["metadata"]["name"],
        "PodNamespace": pod["metadata"]["namespace"],
        "PodUID": pod["metadata"]["uid"],
        "Node": "ceph1",
    }
    # ---- example responses
    out["filter-result.json"] = filter_result(
        names=["ceph3", "ceph1"], failed={"ceph2": "node(s) lack free RBD IOPS"}, unresolvable={}
    )
    out["filter-result-nodes.json"] = filter_result(
        nodes=[nodes["ceph3"], nodes["ceph1"]], failed={"ceph2": "node(s) lack free RBD IOPS"}
    )
    out["prioritize-result.json"] = [
        {"Host": "ceph3", "Score": 8},
        {"Host": "ceph1", "Score": 3},
        {"Host": "ceph2", "Score": 0},
    ]
    keep = full_victims["ceph2"]
    out["preempt-result.json"] = {
        "NodeNameToMetaVictims": {
            "ceph2": {
                "Pods": [{"UID": p["metadata"]["uid"]} for p in keep["Pods"]],
                "NumPDBViolations": keep["NumPDBViolations"],
            }
        }
    }
    out["bind-result.json"] = {"Error": ""}
    # ---- edge cases
    e = {}
    e["filter-names-single.json"] = extender_args(pod, names=["ceph3"])
    e["filter-names-besteffort.json"] = extender_args(ingest_pod(best_effort=True), names=order)
    e["filter-names-empty-list.json"] = extender_args(pod, names=[])
    e["filter-names-lowercase-keys.json"] = {"pod": pod, "nodes": None, "nodenames": order}
    ph = meta_victims(full_victims)
    ph["ceph1"] = {"Pods": [], "NumPDBViolations": 0}
    e["preempt-meta-placeholder.json"] = {"Pod": pod_retry, "NodeNameToVictims": None, "NodeNameToMetaVictims": M(ph)}
    e["filter-result-error.json"] = filter_result(error="rbd capacity cache not synced yet")
    e["filter-result-all-failed.json"] = filter_result(
        names=[],
        failed={"ceph1": "node(s) lack free RBD IOPS", "ceph3": "node(s) lack free RBD IOPS"},
        unresolvable={"ceph2": "node(s) not connected to the ceph public network"},
    )
    e["bind-result-error.json"] = {"Error": "binding rejected: pod UID mismatch"}
    return out, e


def large_fixtures(n, victim_nodes):
    pod = ingest_pod()
    names = ["node-%05d" % i for i in range(1, n + 1)]
    yield "args-names-%d.json" % n, extender_args(pod, names=names)

    def gen_nodes():
        for i, nm in enumerate(names):
            yield node(
                nm, i, "10.%d.%d.%d" % (20 + i // 65025, (i // 255) % 255, i % 255 + 1), "rack-%s" % "abcdefgh"[i % 8]
            )

    yield "args-nodes-%d.json" % n, ("NODES", pod, gen_nodes)
    vict = {}
    tmpl = victims()["ceph3"]
    for i in range(victim_nodes):
        nm = names[(i * 7) % n]
        pods = []
        for p in tmpl["Pods"]:
            q = json.loads(json.dumps(p))
            q["metadata"]["name"] += "-%d" % i
            q["metadata"]["uid"] = uid("pod", q["metadata"]["namespace"], q["metadata"]["name"])
            q["spec"]["nodeName"] = nm
            pods.append(q)
        vict[nm] = {"Pods": pods, "NumPDBViolations": i % 2}
    vict = M(vict)
    yield (
        "preempt-meta-%d.json" % victim_nodes,
        {
            "Pod": ingest_pod(with_failed_condition=True),
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": meta_victims(vict),
        },
    )
    yield (
        "preempt-full-%d.json" % victim_nodes,
        {"Pod": ingest_pod(with_failed_condition=True), "NodeNameToVictims": vict, "NodeNameToMetaVictims": None},
    )


def write(path, obj, pretty):
    path.write_text(go_json(obj, pretty), encoding="utf-8")


def write_streamed_nodes(path, pod, gen_nodes):
    # Same bytes as go_json(extender_args(...)) but without holding every node in memory.
    with path.open("w", encoding="utf-8") as f:
        f.write('{"Pod":' + go_json(pod) + ',"Nodes":{"metadata":{},"items":[')
        for i, nd in enumerate(gen_nodes()):
            if i:
                f.write(",")
            f.write(go_json(nd))
        f.write(']},"NodeNames":null}')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = Path(__file__).resolve().parent
    ap.add_argument(
        "--out", type=Path, default=here, help="directory for the small fixtures (default: the folder of this script)"
    )
    ap.add_argument("--pretty", action="store_true", help="indent output (not wire-exact)")
    ap.add_argument("--large", type=Path, metavar="DIR", help="write large benchmark bodies into DIR")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--victim-nodes", type=int, default=500)
    ap.add_argument(
        "--trim-pod-managed-fields",
        action="store_true",
        help="omit metadata.managedFields from Pods (kube-scheduler >= ~1.36 behaviour)",
    )
    a = ap.parse_args(argv)
    global TRIM_POD_MANAGED_FIELDS
    TRIM_POD_MANAGED_FIELDS = a.trim_pod_managed_fields
    if a.large:
        a.large.mkdir(parents=True, exist_ok=True)
        for fname, obj in large_fixtures(a.nodes, a.victim_nodes):
            p = a.large / fname
            if isinstance(obj, tuple) and obj[0] == "NODES":
                write_streamed_nodes(p, obj[1], obj[2])
            else:
                write(p, obj, a.pretty)
            print("%s %d bytes" % (p, p.stat().st_size))
        return 0
    out, edge = small_fixtures()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "edge").mkdir(exist_ok=True)
    for fname, obj in out.items():
        write(a.out / fname, obj, a.pretty)
    for fname, obj in edge.items():
        write(a.out / "edge" / fname, obj, a.pretty)
    print("wrote %d fixtures + %d edge fixtures into %s" % (len(out), len(edge), a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
