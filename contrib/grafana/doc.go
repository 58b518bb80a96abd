// Package grafana holds shoal's Grafana dashboard (shoal.json) and the test
// that checks it against Grafana's dashboard schema.
package grafana
