package types

import "time"

// Node is a member of a cluster, as GET /v1/nodes lists it.
type Node struct {
	Name         string    `json:"name"`
	Addr         string    `json:"addr,omitempty"`
	State        string    `json:"state"` // ready, draining or down
	Health       string    `json:"health,omitempty"`
	CPUs         int       `json:"cpus"`
	Memory       int64     `json:"memory"`        // bytes
	FrozenMemory int64     `json:"frozen_memory"` // bytes frozen replicas may hold
	Leader       bool      `json:"leader"`
	Joined       time.Time `json:"joined"`
}
