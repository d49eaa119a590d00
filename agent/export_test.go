package agent

// ProbeHardwareFS is probeHardware, for tests.
var ProbeHardwareFS = probeHardware
