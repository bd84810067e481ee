package application

// Queued returns how many requests wait in the service's claim and report
// batchers (tests wait for them to queue up).
func (s *TaskService) Queued() (claims, reports int) {
	count := func(n int) int { return n }
	s.claims.mu.Lock()
	claims = count(len(s.claims.queue))
	s.claims.mu.Unlock()
	if s.reports != nil {
		s.reports.mu.Lock()
		reports = len(s.reports.queue)
		s.reports.mu.Unlock()
	}
	return claims, reports
}

// KeptSeriesQueues returns how many queues' hours the dashboard service
// keeps in memory.
func (s *DashboardService) KeptSeriesQueues() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.asked)
}
