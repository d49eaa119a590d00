package muster

// Version is muster's version; agents must match it (P8).
const Version = "0.1.0"
