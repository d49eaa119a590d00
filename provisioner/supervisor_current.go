package provisioner

// Current returns the provisioner of the current run, or nil between runs.
// It is safe for concurrent use.
func (s *Supervisor) Current() *Provisioner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}
