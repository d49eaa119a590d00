package provisioner

import (
	"slices"
	"testing"
)

func TestPlanMoves(t *testing.T) {
	mv := func(id, from, to string) Move { return Move{MachineID: id, Group: "g", From: from, To: to} }
	tests := []struct {
		name   string
		ms     []member
		usable []string
		want   []Move
	}{
		{"balanced", []member{{"0", "a", nil, true}, {"1", "b", nil, true}, {"2", "c", nil, true}, {"3", "a", nil, true}}, []string{"a", "b", "c"}, nil},
		{"2/1/0 to 1/1/1", []member{{"0", "a", nil, true}, {"1", "b", nil, true}, {"2", "a", nil, true}}, []string{"a", "b", "c"}, []Move{mv("2", "a", "c")}},
		{"3/3 to 2/2/2", []member{{"0", "a", nil, true}, {"1", "b", nil, true}, {"2", "a", nil, true}, {"3", "b", nil, true}, {"4", "a", nil, true}, {"5", "b", nil, true}},
			[]string{"a", "b", "c"}, []Move{mv("4", "a", "c"), mv("5", "b", "c")}},
		{"keep-instance and placed stay", []member{{"0", "a", nil, false}, {"1", "a", nil, false}, {"2", "a", nil, true}}, []string{"a", "b"},
			[]Move{mv("2", "a", "b")}},
		{"nothing movable", []member{{"0", "a", nil, false}, {"1", "a", nil, false}, {"2", "a", nil, false}}, []string{"a", "b"}, nil},
		{"zones constraint respected", []member{{"0", "a", []string{"a", "b"}, true}, {"1", "a", []string{"a", "b"}, true}, {"2", "a", nil, true}, {"3", "b", nil, true}},
			[]string{"a", "b", "c"}, []Move{mv("2", "a", "c")}},
		{"unusable zone not counted", []member{{"0", "x", nil, true}, {"1", "x", nil, true}, {"2", "a", nil, true}}, []string{"a", "b"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := planMoves("g", tt.ms, tt.usable); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
