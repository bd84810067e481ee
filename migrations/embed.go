// Package migrations holds the database schema as numbered SQL files (NNNN_name.sql). The
// postgres adapter applies them in file-name order, each once, under an advisory lock; a file
// that has been applied anywhere is never edited, a change is a new file.
package migrations

import "embed"

// FS holds every *.sql file of this directory.
//
//go:embed *.sql
var FS embed.FS
