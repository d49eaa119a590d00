package api

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
)

// FuzzPageQuery: any after= and limit= either parse to a machine id (or
// none) and a limit in range, or are refused; never a panic.
func FuzzPageQuery(f *testing.F) {
	for _, s := range [][2]string{{"", ""}, {"0", "1"}, {"17", "10000"}, {"01", "0"}, {"-1", "-1"}, {"x", "1e3"}, {"99999999999999999999", "10001"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, after, limit string) {
		q := url.Values{"after": {after}, "limit": {limit}}
		r := httptest.NewRequest("GET", "/v1/models/m/machines?"+q.Encode(), nil)
		a, n, paged, err := pageQuery(r)
		if err != nil {
			return
		}
		if !paged || n < 1 || n > MaxPageSize || strconv.Itoa(n) != limit {
			t.Fatalf("after %q limit %q: accepted as limit %d, paged %v", after, limit, n, paged)
		}
		if id, perr := strconv.ParseUint(a, 10, 63); perr != nil || strconv.FormatUint(id, 10) != a || a != after {
			t.Fatalf("after %q: accepted as %q", after, a)
		}
	})
}
