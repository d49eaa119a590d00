package sqlstore

import "testing"

func TestRebindDollar(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"none", `SELECT 1`, `SELECT 1`},
		{"several", `UPDATE t SET a = ?, b = ? WHERE c = ?`, `UPDATE t SET a = $1, b = $2 WHERE c = $3`},
		{"quoted kept", `SELECT '?' || x FROM t WHERE y = ?`, `SELECT '?' || x FROM t WHERE y = $1`},
		{"escaped quote", `SELECT 'it''s ?' WHERE y = ? AND z = ?`, `SELECT 'it''s ?' WHERE y = $1 AND z = $2`},
		{"cast", `unnest(?::bigint[])`, `unnest($1::bigint[])`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rebindDollar(tc.in); got != tc.want {
				t.Fatalf("rebind %q: got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
