// Command reference is the Go baseline for loadext's benchmarks: a minimal extender doing the
// same work from an in-memory snapshot of the same values. Standard library only. It decodes
// only the fields it needs, echoes Node objects byte for byte in non-cache mode, and keeps a
// precomputed verdict per node, as loadext does: the strongest honest Go baseline.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"net/http"
	"os"
)

type load struct {
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory"`
}

type snapshot struct {
	Nodes           map[string]load `json:"nodes"`
	CPUThreshold    float64         `json:"cpuThreshold"`
	MemoryThreshold float64         `json:"memoryThreshold"`
	CPUWeight       float64         `json:"cpuWeight"`
	MemoryWeight    float64         `json:"memoryWeight"`
}

type verdict struct {
	passed bool
	score  int64
	reason string
}

var (
	verdicts = map[string]verdict{}
	noData   = verdict{passed: true, score: 5}
)

func percent(r float64) string { return fmt.Sprintf("%g%%", r*100) }

// judge mirrors loadext's policy: reject above a threshold, else 10 x weighted mean free share.
func judge(s snapshot, l load) verdict {
	var over []string
	if l.CPU > s.CPUThreshold {
		over = append(over, "cpu above "+percent(s.CPUThreshold))
	}
	if l.Memory > s.MemoryThreshold {
		over = append(over, "memory above "+percent(s.MemoryThreshold))
	}
	if len(over) > 0 {
		reason := "loadext: " + over[0]
		for _, o := range over[1:] {
			reason += ", " + o
		}
		return verdict{passed: false, score: 0, reason: reason}
	}
	mean := 10 * (s.CPUWeight*(1-l.CPU) + s.MemoryWeight*(1-l.Memory)) / (s.CPUWeight + s.MemoryWeight)
	return verdict{passed: true, score: int64(math.RoundToEven(mean))}
}

func lookup(name string) verdict {
	if v, ok := verdicts[name]; ok {
		return v
	}
	return noData
}

// extenderArgs decodes only what the decisions need; encoding/json matches keys
// case-insensitively, as the scheduler's own decoder does.
type extenderArgs struct {
	Pod *struct {
		Metadata struct {
			OwnerReferences []struct {
				Kind string `json:"kind"`
			} `json:"ownerReferences"`
		} `json:"metadata"`
	}
	Nodes *struct {
		Items []json.RawMessage `json:"items"`
	}
	NodeNames *[]string
}

type nodeName struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func isDaemonSet(a *extenderArgs) bool {
	if a.Pod == nil {
		return false
	}
	for _, o := range a.Pod.Metadata.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

type candidate struct {
	name string
	raw  json.RawMessage
}

func candidates(a *extenderArgs) ([]candidate, error) {
	if a.NodeNames != nil {
		out := make([]candidate, len(*a.NodeNames))
		for i, n := range *a.NodeNames {
			out[i] = candidate{name: n}
		}
		return out, nil
	}
	if a.Nodes == nil {
		return nil, nil
	}
	out := make([]candidate, len(a.Nodes.Items))
	for i, raw := range a.Nodes.Items {
		var n nodeName
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, err
		}
		out[i] = candidate{name: n.Metadata.Name, raw: raw}
	}
	return out, nil
}

func decode(w http.ResponseWriter, r *http.Request, into any) bool {
	if err := json.NewDecoder(r.Body).Decode(into); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":%q}`, err.Error())
		return false
	}
	return true
}

// decodeArgs reads a filter or prioritize body; false means a 400 was already written.
func decodeArgs(w http.ResponseWriter, r *http.Request) (*extenderArgs, []candidate, bool) {
	var a extenderArgs
	if !decode(w, r, &a) {
		return nil, nil, false
	}
	nodes, err := candidates(&a)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return nil, nil, false
	}
	return &a, nodes, true
}

func filter(w http.ResponseWriter, r *http.Request) {
	a, nodes, ok := decodeArgs(w, r)
	if !ok {
		return
	}
	exempt := isDaemonSet(a)
	var passed []candidate
	failed := map[string]string{}
	for _, c := range nodes {
		if v := lookup(c.name); v.passed || exempt {
			passed = append(passed, c)
		} else {
			failed[c.name] = v.reason
		}
	}
	failedJSON, _ := json.Marshal(failed)
	var buf bytes.Buffer
	if a.NodeNames != nil || a.Nodes == nil {
		names := make([]string, len(passed))
		for i, c := range passed {
			names[i] = c.name
		}
		namesJSON, _ := json.Marshal(names)
		buf.WriteString(`{"Nodes":null,"NodeNames":`)
		buf.Write(namesJSON)
	} else {
		buf.WriteString(`{"Nodes":{"metadata":{},"items":[`)
		for i, c := range passed {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.Write(c.raw)
		}
		buf.WriteString(`]},"NodeNames":null`)
	}
	buf.WriteString(`,"FailedNodes":{},"FailedAndUnresolvableNodes":`)
	buf.Write(failedJSON)
	buf.WriteString(`,"Error":""}`)
	w.Header().Set("Content-Type", "application/json")
	w.Write(buf.Bytes())
}

type hostPriority struct {
	Host  string
	Score int64
}

func prioritize(w http.ResponseWriter, r *http.Request) {
	_, nodes, ok := decodeArgs(w, r)
	if !ok {
		return
	}
	out := make([]hostPriority, len(nodes))
	for i, c := range nodes {
		out[i] = hostPriority{Host: c.name, Score: lookup(c.name).score}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

type metaVictims struct {
	Pods []struct {
		UID string
	}
	NumPDBViolations int64
}

type preemptionArgs struct {
	Pod                   json.RawMessage
	NodeNameToMetaVictims map[string]metaVictims
}

func preempt(w http.ResponseWriter, r *http.Request) {
	var a preemptionArgs
	if !decode(w, r, &a) {
		return
	}
	kept := map[string]metaVictims{}
	for node, victims := range a.NodeNameToMetaVictims {
		if lookup(node).passed {
			kept[node] = victims
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"NodeNameToMetaVictims": kept})
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8890", "address to listen on")
	snapshotFile := flag.String("snapshot", "", "JSON file with the node values and thresholds")
	flag.Parse()
	raw, err := os.ReadFile(*snapshotFile)
	if err != nil {
		log.Fatal(err)
	}
	var s snapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		log.Fatal(err)
	}
	for name, l := range s.Nodes {
		verdicts[name] = judge(s, l)
	}
	http.HandleFunc("/filter", filter)
	http.HandleFunc("/prioritize", prioritize)
	http.HandleFunc("/preempt", preempt)
	log.Printf("reference extender on %s with %d nodes", *listen, len(verdicts))
	log.Fatal(http.ListenAndServe(*listen, nil))
}
