package store

import (
	"fmt"
	"strconv"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Key layout. Every key shoal writes lives under a versioned root, so a later
// schema can live beside this one while it is migrated:
//
//	/shoal/
//	├── meta/
//	│   └── schema                      "1" (SchemaVersion, decimal text)
//	└── v1/
//	    ├── containers/<node>/<id>      containers a node's runtime manages
//	    ├── apps/<name>                 an app's desired state
//	    ├── revisions/<app>/<n>         immutable revisions, n zero-padded
//	    ├── replicas/<app>/<id>         replicas of an app and their state
//	    ├── jobs/<id>                   queued, running and finished jobs
//	    ├── nodes/<name>                node records: address, capacity, draining
//	    ├── alive/<name>                a node's heartbeat, on the node's lease
//	    ├── leader/<lease>              candidates of the leader election
//	    ├── routes/<app>                the leader's route of an app, for every node's proxy
//	    ├── cluster/secret              the secret nodes send each other
//	    ├── idranges/<i>                the app holding host id range i (see IDRangeKey)
//	    ├── secrets/<app>/<name>        an app's secrets, sealed (internal/secrets)
//	    ├── certs/<domain>              a certificate the proxy serves, key sealed (internal/certs)
//	    ├── domains/<domain>            the app that owns a custom domain (internal/certs)
//	    ├── acme/account                the ACME account, its key sealed (internal/acme)
//	    ├── acme/orders/<domain>        a domain's ACME failures and next try (internal/acme)
//	    ├── acme/challenges/<token>     a challenge every node's proxy answers (internal/acme)
//	    ├── acme/wanted/<domain>        a name asked for on a TLS handshake and allowed (internal/acme)
//	    └── events/<seq>                the event log, seq zero-padded
//
// Names and ids are single path elements: they never contain "/". Numbers in
// keys are zero-padded to 20 digits so that lexical order (the order List
// returns) is numeric order.
//
// Both backends write MetaSchemaKey when they open an empty store and refuse to
// open a store whose schema is newer than SchemaVersion.

// SchemaVersion is the version of the key layout this build reads and writes.
const SchemaVersion = 1

// Roots of the layout.
const (
	// Root is the prefix of every key in schema version 1.
	Root = "/shoal/v1/"
	// MetaSchemaKey holds the schema version of the store as decimal text.
	MetaSchemaKey = "/shoal/meta/schema"
)

// Prefixes of the collections; List and Watch take them.
const (
	ContainersPrefix = Root + "containers/"
	AppsPrefix       = Root + "apps/"
	RevisionsRoot    = Root + "revisions/"
	ReplicasRoot     = Root + "replicas/"
	JobsPrefix       = Root + "jobs/"
	NodesPrefix      = Root + "nodes/"
	AlivePrefix      = Root + "alive/"
	LeaderPrefix     = Root + "leader/"
	EventsPrefix     = Root + "events/"
	RoutesPrefix     = Root + "routes/"
	SecretsRoot      = Root + "secrets/"
	CertsPrefix      = Root + "certs/"
	DomainsPrefix    = Root + "domains/"
	ACMEPrefix       = Root + "acme/"
	// ACMEAccountKey holds the ACME account (internal/acme).
	ACMEAccountKey       = ACMEPrefix + "account"
	ACMEOrdersPrefix     = ACMEPrefix + "orders/"
	ACMEChallengesPrefix = ACMEPrefix + "challenges/"
	ACMEWantedPrefix     = ACMEPrefix + "wanted/"
)

// ClusterSecretKey holds the secret every node of a cluster sends to the
// others (when no --cluster-token-file is given): made once by the first
// node that finds it missing.
const ClusterSecretKey = Root + "cluster/secret"

// NodeContainersPrefix is the prefix of the containers of one node: each
// node's runtime lists, adopts and cleans only its own.
func NodeContainersPrefix(node string) string { return ContainersPrefix + node + "/" }

// ContainerKey is the key of container id on node.
func ContainerKey(node, id string) string { return NodeContainersPrefix(node) + id }

// AppKey is the key of an app's desired state.
func AppKey(name string) string { return AppsPrefix + name }

// RevisionsPrefix is the prefix of every revision of app.
func RevisionsPrefix(app string) string { return RevisionsRoot + app + "/" }

// RevisionKey is the key of revision n of app.
func RevisionKey(app string, n int) string { return RevisionsPrefix(app) + pad(int64(n)) }

// ReplicasPrefix is the prefix of every replica of app.
func ReplicasPrefix(app string) string { return ReplicasRoot + app + "/" }

// ReplicaKey is the key of replica id of app.
func ReplicaKey(app, id string) string { return ReplicasPrefix(app) + id }

// JobKey is the key of the job with the given id.
func JobKey(id string) string { return JobsPrefix + id }

// NodeKey is the key of the node with the given name.
func NodeKey(name string) string { return NodesPrefix + name }

// AliveKey is the heartbeat key of the node with the given name; it lives on
// the node's lease and is gone once the lease expires.
func AliveKey(name string) string { return AlivePrefix + name }

// RouteKey is the key of the route the cluster's leader published for app.
func RouteKey(app string) string { return RoutesPrefix + app }

// SecretsPrefix is the prefix of every secret of app.
func SecretsPrefix(app string) string { return SecretsRoot + app + "/" }

// SecretKey is the key of app's secret name (sealed, never plain).
func SecretKey(app, name string) string { return SecretsPrefix(app) + name }

// CertKey is the key of the certificate added under domain (its first
// name; "*.example.test" for a wildcard).
func CertKey(domain string) string { return CertsPrefix + domain }

// DomainKey is the key of the claim of a custom domain: its value names the
// app that owns it.
func DomainKey(domain string) string { return DomainsPrefix + domain }

// ACMEOrderKey is the key of domain's ACME order state.
func ACMEOrderKey(domain string) string { return ACMEOrdersPrefix + domain }

// ACMEChallengeKey is the key of the pending ACME challenge token.
func ACMEChallengeKey(token string) string { return ACMEChallengesPrefix + token }

// ACMEWantedKey is the key of a name a TLS handshake asked a certificate
// for, allowed by the operator's on-demand policy.
func ACMEWantedKey(domain string) string { return ACMEWantedPrefix + domain }

// EventKey is the key of event number seq in the event log.
func EventKey(seq int64) string { return EventsPrefix + pad(seq) }

// ParseSeq reads the zero-padded number at the end of a revision or event key.
func ParseSeq(key string) (int64, error) {
	i := len(key)
	for i > 0 && key[i-1] != '/' {
		i--
	}
	n, err := strconv.ParseInt(key[i:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("key %q: no number at the end: %w", key, errdefs.ErrInvalid)
	}
	return n, nil
}

func pad(n int64) string { return fmt.Sprintf("%020d", n) }
