package api

import "github.com/shoal-run/shoal/internal/api/types"

// Transitional aliases of the wire types still named through package api by
// internal/serving: App, DeployRequest, Event, Replica, RollbackRequest,
// Rollout, RolloutDone, RolloutFailed, RolloutProgressing,
// RolloutRolledBack, ScaleRequest, TrafficRequest and TrafficTarget. New
// code names them in package types; these go once serving does too.
type (
	App             = types.App
	DeployRequest   = types.DeployRequest
	Event           = types.Event
	Replica         = types.Replica
	RollbackRequest = types.RollbackRequest
	Rollout         = types.Rollout
	ScaleRequest    = types.ScaleRequest
	TrafficRequest  = types.TrafficRequest
	TrafficTarget   = types.TrafficTarget
)

// Transitional copies of the rollout states, for internal/serving.
const (
	RolloutProgressing = types.RolloutProgressing
	RolloutDone        = types.RolloutDone
	RolloutRolledBack  = types.RolloutRolledBack
	RolloutFailed      = types.RolloutFailed
)
