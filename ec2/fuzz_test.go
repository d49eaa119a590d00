package ec2

import (
	"strings"
	"testing"
)

// FuzzParseLaunches: user data read back from the cloud is untrusted; any
// bytes give records or an error, never a panic, and records always have
// a non-negative launch index.
func FuzzParseLaunches(f *testing.F) {
	ud, err := batchUserData([]launch{{Machine: "3", LaunchToken: strings.Repeat("a", 64)}, {Machine: "4", LaunchToken: strings.Repeat("b", 64)}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ud)
	f.Add([]byte("#cloud-config\nwrite_files:\n- path: /etc/muster/agents/0.json\n  content: '{}'\n"))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseLaunches(data)
		if err != nil {
			if got != nil {
				t.Errorf("records %v with error %v", got, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of several lines: %q", err)
			}
			return
		}
		for i := range got {
			if i < 0 {
				t.Errorf("negative launch index %d", i)
			}
		}
	})
}

// FuzzApplyModelConfig: any key and value are accepted or refused with a
// one-line error; never a panic.
func FuzzApplyModelConfig(f *testing.F) {
	f.Add("region", "us-east-1")
	f.Add("endpoint", "http://127.0.0.1:7070/ec2/")
	f.Add("secret-key", "x")
	f.Add("endpoint", "://\x00")
	f.Fuzz(func(t *testing.T, key, value string) {
		var cfg Config
		err := ApplyModelConfig(&cfg, map[string]string{"region": "us-east-1", key: value})
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error of several lines: %q", err)
		}
	})
}
