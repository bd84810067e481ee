package ports

import "time"

// ReadStatus says where the reads that may lag (listings, queue statistics,
// the dashboard's pages) are served from: a read replica while it keeps up,
// the primary otherwise.
type ReadStatus struct {
	// Replica is set when a read replica is configured
	// (TASKMASTER_READ_DATABASE_URL); the other fields are then meaningful.
	Replica bool
	// OnReplica says the reads go to the replica now (else to the primary).
	OnReplica bool
	// Lag is how far behind the primary the replica was at its last check:
	// an upper bound (the age of the last transaction it replayed while it
	// had not replayed all it received; zero when it had). LagKnown is false
	// when the check failed.
	Lag      time.Duration
	LagKnown bool
	// MaxLag is the lag beyond which the primary serves the reads.
	MaxLag time.Duration
	// Reason says why the primary serves them, when it does ("unreachable",
	// "lagging", "not streaming", "not checked yet").
	Reason string
	// CheckedAt is when the replica was last checked (the instance's clock).
	CheckedAt time.Time
}

// ReadSource tells where the reads that may lag are served from.
type ReadSource interface {
	ReadStatus() ReadStatus
}
