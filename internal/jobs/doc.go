// Package jobs is the job queue: a persistent queue in the store, a pure
// scheduler (weighted fair share between tenants by job count, priorities
// within a tenant, per-tenant quotas), slots bounding how many jobs run at
// once, callbacks with retries and back-off, a retention period for
// results, and the plan of a job (its steps and limits, validated). What
// runs a job's steps is a Runner: the daemon's is package sandbox's
// Sandbox (hard-limited containers, warm and reused).
//
// A job is written to the store when it is submitted, when it starts and
// when it ends (jobs/<id>, see store.JobKey). A restarted daemon queues
// again what was queued and what was running (that attempt is counted; a
// job lost MaxAttempts times is failed with the reason), and retries
// callbacks still pending. A daemon that stops gracefully kills its running
// jobs and queues them again without counting the attempt. What is stored
// is the package's own Job record (with the request as submitted, until
// the job ends); the API shows a job as a types.Job (Job.Wire), converted
// where the daemon hands the queue to the API, and a callback receives the
// same.
//
// In a cluster (OpenCluster, on an etcd store) the queue is the cluster's,
// a ClusterQueue (one host's is a Manager; both are a Queue, chosen once
// by the daemon): any node stores a submitted job; the leader's Scheduler,
// over every node's slots, picks the next job and a fenced write gives it
// to a node with a free slot; that node runs it and stores its end. A job
// whose node is lost is queued again with the reason, or ends Lost after
// MaxAttempts (see assign.go, nodework.go). The leader's part is a
// cluster.LeaderWork, established and revoked by the daemon's cluster.Hub.
//
// The Manager holds the Scheduler under its lock and starts a goroutine
// per running job; the Runner (a sandbox.Sandbox in the daemon, a fake in
// the queue tests) runs the steps. Time comes from a clock.Clock so that retention
// and back-off are tested with the fake clock.
package jobs
