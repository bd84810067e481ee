package localpg

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// children returns the processes whose parent is pid, from /proc. PostgreSQL's backends and
// auxiliary processes are the postmaster's children, each in a session of its own (setsid), so
// signalling the postmaster's process group does not reach them.
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat") // the pattern is valid
	var out []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		s := string(b)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil && ppid == pid {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}
