package metrics

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMetricsFormat(t *testing.T) {
	if got, want := labels("a", `x"y\z`+"\n", "b", ""), `{a="x\"y\\z\n",b=""}`; got != want {
		t.Errorf("labels: %s, want %s", got, want)
	}
	h := newHistogram([]float64{1, 2})
	for _, d := range []time.Duration{time.Second, 1500 * time.Millisecond, 5 * time.Second, -time.Second} {
		h.observe(d)
	}
	var b strings.Builder
	h.write(&b, "x", `{r="q"}`)
	want := `x_bucket{r="q",le="1"} 2
x_bucket{r="q",le="2"} 3
x_bucket{r="q",le="+Inf"} 4
x_sum{r="q"} 7.5
x_count{r="q"} 4
`
	if b.String() != want {
		t.Errorf("histogram:\n%s\nwant:\n%s", b.String(), want)
	}
	// Concurrent updates and scrapes (run with -race).
	m := New()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r, _ := http.NewRequest("WEIRD", "/x", nil)
			r.Pattern = "GET /v1/x"
			for range 100 {
				m.Request(r, 200+i, time.Millisecond)
				m.Exec(time.Millisecond, i%2 == 0)
				m.Created(time.Second)
				m.Write(&strings.Builder{}, map[string]int{"running": i})
			}
		})
	}
	wg.Wait()
	if n := m.requests[reqKey{"other", "/v1/x", "200"}]; n != 100 {
		t.Errorf("requests with an odd method: %d, want 100 under method other", n)
	}
}
