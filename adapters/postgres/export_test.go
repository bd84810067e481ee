package postgres

import (
	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/ports"
)

// TxOf returns the transaction stores work on, for tests that stage rows
// in it (the same now(), the same snapshot).
func TxOf(st ports.Stores) *sqlx.Tx { return st.Tasks.(*TaskStore).st.tx }

// TimedOutTasksSQL is the timeout reaper's query, for plan tests.
var TimedOutTasksSQL = timedOutTasksSQL

// FinishedPayloads and ParseFinished encode and decode FinishedChannel's
// payloads.
var (
	FinishedPayloads = finishedPayloads
	ParseFinished    = parseFinished
)

// SearchSQL is BulkStore.Search's statement, for plan tests.
var SearchSQL = searchSQL

// ReportPlanSettings are the settings a shared transaction of reports pins.
const ReportPlanSettings = reportPlanSettings

// JSONRenderedSize is the mirror of jsonb's rule without the size policies
// (jsonRenderedSize), for the differential target.
func JSONRenderedSize(raw []byte) (int64, error) {
	_, n, err := jsonRenderedSize(raw)
	return n, err
}
