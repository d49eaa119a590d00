package controller

import (
	"testing"

	"github.com/musterhq/muster"
)

// TestCloudKey: models on the same cloud share the capacity memory's key
// (Z7); an embedded sim is a cloud of its own.
func TestCloudKey(t *testing.T) {
	sim := func(uuid, ep string) muster.Model {
		return muster.Model{UUID: uuid, Provider: "sim", Config: map[string]string{"endpoint": ep}}
	}
	ec2 := func(uuid, region string) muster.Model {
		return muster.Model{UUID: uuid, Provider: "ec2", Config: map[string]string{"region": region}}
	}
	for _, tc := range []struct {
		name string
		a, b muster.Model
		same bool
	}{
		{"one sim serve", sim("u1", "http://h:1"), sim("u2", "http://h:1"), true},
		{"two sim serves", sim("u1", "http://h:1"), sim("u2", "http://h:2"), false},
		{"embedded sims", sim("u1", ""), sim("u2", ""), false},
		{"one region", ec2("u1", "us-east-1"), ec2("u2", "us-east-1"), true},
		{"two regions", ec2("u1", "us-east-1"), ec2("u2", "eu-west-1"), false},
		{"sim and ec2", sim("u1", "x"), ec2("u2", "x"), false},
	} {
		if got := cloudKey(tc.a) == cloudKey(tc.b); got != tc.same || cloudKey(tc.a) == "" {
			t.Errorf("%s: keys %q and %q, same %v, want %v", tc.name, cloudKey(tc.a), cloudKey(tc.b), got, tc.same)
		}
	}
}
