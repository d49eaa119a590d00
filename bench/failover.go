package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/sim"
)

// The failover scenario: three `muster controller` processes on one
// PostgreSQL schema and a sim served by the bench; the default model's
// lease holder is killed with SIGKILL failoverKills times, and restarted
// after each takeover so that three controllers run again.
const (
	failoverControllers = 3
	failoverKills       = 5
	failoverAddsPerKill = 2 // machines added after each takeover, provisioned before the next kill
)

// FailoverRound is one kill.
type FailoverRound struct {
	Killed    string `json:"killed"`
	NewHolder string `json:"new_holder"`
	// LeaseSeconds: from the kill until the bench read another
	// controller's id in the model's lease row (polled every 10 ms).
	LeaseSeconds float64 `json:"lease_seconds"`
	// TakeoverSeconds: from the kill until the new holder logged
	// "provisioner started".
	TakeoverSeconds float64 `json:"takeover_seconds"`
}

// Failover is the outcome of the failover scenario (the --json line).
type Failover struct {
	Scenario      string          `json:"scenario"`
	Controllers   int             `json:"controllers"`
	Machines      int             `json:"machines"` // at the end
	Rounds        []FailoverRound `json:"rounds"`
	MedianSeconds float64         `json:"median_takeover_seconds"`
	MaxSeconds    float64         `json:"max_takeover_seconds"`
	// Overlaps counts pairs of provisioner runs, from the controllers'
	// logs (a killed run ends at its kill), that overlap in time.
	Overlaps int `json:"overlaps"`
	// Duplicates counts machines with more than one instance in the sim.
	Duplicates int `json:"duplicate_instances"`
}

// ctrlProc is one run of a controller process; a restart is a new run in
// the same data dir, with its own log.
type ctrlProc struct {
	name, dir, log, url, id string
	cmd                     *exec.Cmd
	done                    chan struct{}
	killed                  time.Time // zero while it runs
}

type failoverRun struct {
	bin, store, tmp, simURL string
	timeout                 time.Duration
	runs                    []*ctrlProc // every run, in start order
	live                    map[string]*ctrlProc
	db                      *sql.DB
	cc                      *controller.ClientConfig
}

func runFailover(ctx context.Context, machines int, bin string, timeout time.Duration) (Failover, error) {
	base := os.Getenv("MUSTER_TEST_POSTGRES")
	if base == "" {
		return Failover{}, errors.New("the failover scenario needs MUSTER_TEST_POSTGRES=postgres://user:password@127.0.0.1:5432/db?sslmode=disable (a database it may create a schema in)")
	}
	tmp, err := os.MkdirTemp("", "muster-bench-failover-")
	if err != nil {
		return Failover{}, err
	}
	defer os.RemoveAll(tmp)
	if bin == "" {
		bin = filepath.Join(tmp, "muster")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/musterhq/muster/cmd/muster")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return Failover{}, fmt.Errorf("build muster: %w", err)
		}
	}
	store, db, drop, err := failoverSchema(ctx, base)
	if err != nil {
		return Failover{}, err
	}
	defer drop()
	simURL, cloud, stopSim, err := serveSim()
	if err != nil {
		return Failover{}, err
	}
	defer stopSim()
	r := &failoverRun{bin: bin, store: store, tmp: tmp, simURL: simURL, timeout: timeout, live: map[string]*ctrlProc{}, db: db}
	defer func() {
		for _, p := range r.live {
			p.cmd.Process.Kill()
			<-p.done
		}
	}()
	return r.run(ctx, machines, cloud)
}

func (r *failoverRun) run(ctx context.Context, machines int, cloud *sim.Cloud) (Failover, error) {
	for i := range failoverControllers {
		if _, err := r.start(ctx, string(rune('a'+i))); err != nil {
			return Failover{}, err
		}
	}
	cc, err := controller.LoadClientConfig(filepath.Join(r.tmp, "a", "client.yaml"))
	if err != nil {
		return Failover{}, err
	}
	r.cc = cc
	cl, err := r.client()
	if err != nil {
		return Failover{}, err
	}
	m, err := cl.Model(ctx, muster.DefaultModel)
	if err != nil {
		return Failover{}, fmt.Errorf("default model: %w", err)
	}
	lease := controller.LeaseName(m.UUID)
	if _, err := cl.AddMachines(ctx, muster.DefaultModel, api.AddMachinesRequest{Count: machines}); err != nil {
		return Failover{}, fmt.Errorf("add machines: %w", err)
	}
	res := Failover{Scenario: "failover", Controllers: failoverControllers}
	if err := r.provisioned(ctx, machines); err != nil {
		return res, err
	}
	for range failoverKills {
		holder, err := r.holder(ctx, lease)
		if err != nil {
			return res, err
		}
		p := r.byID(holder)
		if p == nil {
			return res, fmt.Errorf("lease holder %q is no running controller", holder)
		}
		if err := p.cmd.Process.Kill(); err != nil {
			return res, fmt.Errorf("kill controller %s: %w", p.name, err)
		}
		p.killed = time.Now()
		<-p.done
		delete(r.live, p.name)
		round := FailoverRound{Killed: p.name}
		err = r.waitFor(ctx, "another controller holds the lease", func() (bool, error) {
			h, err := r.holder(ctx, lease)
			if n := r.byID(h); err == nil && n != nil {
				round.NewHolder, round.LeaseSeconds = n.name, round3(time.Since(p.killed).Seconds())
				return true, nil
			}
			return false, err
		})
		if err != nil {
			return res, err
		}
		err = r.waitFor(ctx, "the new holder runs the provisioner", func() (bool, error) {
			runs, err := provisionerRuns(r.live[round.NewHolder])
			for _, run := range runs {
				if run[0].After(p.killed) {
					round.TakeoverSeconds = round3(run[0].Sub(p.killed).Seconds())
					return true, nil
				}
			}
			return false, err
		})
		if err != nil {
			return res, err
		}
		res.Rounds = append(res.Rounds, round)
		if _, err := r.start(ctx, p.name); err != nil {
			return res, err
		}
		if cl, err = r.client(); err != nil {
			return res, err
		}
		if _, err := cl.AddMachines(ctx, muster.DefaultModel, api.AddMachinesRequest{Count: failoverAddsPerKill}); err != nil {
			return res, fmt.Errorf("add machines: %w", err)
		}
		machines += failoverAddsPerKill
		if err := r.provisioned(ctx, machines); err != nil {
			return res, err
		}
	}
	res.Machines = machines
	var ts []float64
	for _, rd := range res.Rounds {
		ts = append(ts, rd.TakeoverSeconds)
	}
	sort.Float64s(ts)
	res.MedianSeconds, res.MaxSeconds = round3(medianSorted(ts)), ts[len(ts)-1]
	var runs [][2]time.Time
	for _, p := range r.runs {
		pr, err := provisionerRuns(p)
		if err != nil {
			return res, err
		}
		runs = append(runs, pr...)
	}
	res.Overlaps = overlaps(runs)
	perMachine := map[string]int{}
	for _, i := range cloud.AllInstances() {
		if i.Model() == m.UUID {
			perMachine[i.Tags[muster.TagMachine]]++
		}
	}
	for _, n := range perMachine {
		if n > 1 {
			res.Duplicates++
		}
	}
	return res, nil
}

// start starts a run of controller name (its data dir kept across runs)
// and waits until it listens.
func (r *failoverRun) start(ctx context.Context, name string) (*ctrlProc, error) {
	dir := filepath.Join(r.tmp, name)
	p := &ctrlProc{name: name, dir: dir, log: filepath.Join(r.tmp, fmt.Sprintf("%s-%d.log", name, len(r.runs))), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	home := filepath.Join(r.tmp, "home")
	p.cmd = exec.Command(r.bin, "controller", "--store", r.store, "--data-dir", dir, "--listen", "127.0.0.1:0",
		"--default-sim-endpoint", r.simURL, "--log-format", "json")
	p.cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "MUSTER_CONFIG=", "MUSTER_MODEL=")
	p.cmd.Stderr = logf
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start controller %s: %w", name, err)
	}
	r.runs = append(r.runs, p)
	r.live[name] = p
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "controller listening on "); ok {
				urls <- u
			}
		}
		io.Copy(io.Discard, stdout)
		p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	select {
	case p.url = <-urls:
	case <-p.done:
		return nil, fmt.Errorf("controller %s exited at start; see its log %s", name, p.log)
	case <-time.After(r.timeout):
		return nil, fmt.Errorf("controller %s not listening after %s", name, r.timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	id, err := os.ReadFile(filepath.Join(dir, controller.IDFile))
	if err != nil {
		return nil, err
	}
	p.id = strings.TrimSpace(string(id))
	return p, nil
}

// client returns an API client of a running controller.
func (r *failoverRun) client() (*api.Client, error) {
	for _, p := range r.live {
		return api.NewClient(api.ClientConfig{URL: p.url, CACert: []byte(r.cc.CACert), Token: r.cc.Token})
	}
	return nil, errors.New("no controller runs")
}

// byID returns the running controller whose id is id, or nil.
func (r *failoverRun) byID(id string) *ctrlProc {
	for _, p := range r.live {
		if p.id == id {
			return p
		}
	}
	return nil
}

// holder reads the lease's holder from the store ("" when nobody holds it).
func (r *failoverRun) holder(ctx context.Context, lease string) (string, error) {
	var h string
	err := r.db.QueryRowContext(ctx, `SELECT holder FROM leases WHERE name = $1`, lease).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return h, err
}

// provisioned waits until the default model has n machines, each with an
// instance.
func (r *failoverRun) provisioned(ctx context.Context, n int) error {
	return r.waitFor(ctx, fmt.Sprintf("%d machines provisioned", n), func() (bool, error) {
		cl, err := r.client()
		if err != nil {
			return false, err
		}
		st, err := cl.Status(ctx, muster.DefaultModel)
		if err != nil {
			return false, nil // the controller asked may just have been killed
		}
		got := 0
		for _, m := range st.Machines {
			if m.InstanceID != "" {
				got++
			}
		}
		return got == n, nil
	})
}

// waitFor polls cond every 10 ms until it holds, fails or r.timeout passes.
func (r *failoverRun) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(r.timeout)
	for {
		ok, err := cond()
		switch {
		case err != nil:
			return fmt.Errorf("waiting until %s: %w", what, err)
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("not %s within %s", what, r.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// provisionerRuns reads the runs of the model's provisioner from a
// controller run's JSON log: from each "provisioner started" to the next
// "provisioner stopped", or to the kill, or to now.
func provisionerRuns(p *ctrlProc) ([][2]time.Time, error) {
	f, err := os.Open(p.log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs [][2]time.Time
	var started time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue // a partly written last line
		}
		switch {
		case rec.Msg == "provisioner started" && started.IsZero():
			started = rec.Time
		case rec.Msg == "provisioner stopped" && !started.IsZero():
			runs = append(runs, [2]time.Time{started, rec.Time})
			started = time.Time{}
		}
	}
	if !started.IsZero() {
		end := p.killed
		if end.IsZero() {
			end = time.Now()
		}
		runs = append(runs, [2]time.Time{started, end})
	}
	return runs, sc.Err()
}

// overlaps counts the pairs of runs that overlap in time.
func overlaps(runs [][2]time.Time) int {
	n := 0
	for i := range runs {
		for j := i + 1; j < len(runs); j++ {
			if runs[i][0].Before(runs[j][1]) && runs[j][0].Before(runs[i][1]) {
				n++
			}
		}
	}
	return n
}

func medianSorted(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// failoverSchema makes a schema of its own in the database at base and
// returns the store URL selecting it, a connection to it, and a func that
// drops it.
func failoverSchema(ctx context.Context, base string) (string, *sql.DB, func(), error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, nil, fmt.Errorf("bad MUSTER_TEST_POSTGRES: %w", err)
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, nil, err
	}
	var b [4]byte
	rand.Read(b[:])
	schema := "bench_failover_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		admin.Close()
		return "", nil, nil, fmt.Errorf("create schema in MUSTER_TEST_POSTGRES: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		admin.Close()
		return "", nil, nil, err
	}
	drop := func() {
		db.Close()
		if _, err := admin.Exec(`DROP SCHEMA "` + schema + `" CASCADE`); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", schema, err)
		}
		admin.Close()
	}
	return u.String(), db, drop, nil
}

// serveSim serves an in-process sim of three unlimited zones on loopback.
func serveSim() (string, *sim.Cloud, func(), error) {
	var zones []sim.ZoneConfig
	for _, z := range zoneNames {
		zones = append(zones, sim.ZoneConfig{Name: z, Available: true, Capacity: sim.Unlimited})
	}
	cloud, err := sim.Open(sim.Config{Zones: zones})
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cloud.Close()
		return "", nil, nil, err
	}
	srv := &http.Server{Handler: sim.NewServer(cloud)}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), cloud, func() {
		srv.Close()
		cloud.Close()
	}, nil
}

func printFailover(out io.Writer, f Failover) {
	fmt.Fprintf(out, "failover on PostgreSQL: %d controllers, kill -9 of the default model's lease holder %d times (%d machines at the end)\n\n",
		f.Controllers, len(f.Rounds), f.Machines)
	fmt.Fprintf(out, "%-5s %-7s %-11s %12s %16s\n", "kill", "killed", "new holder", "lease held", "provisioner runs")
	for i, rd := range f.Rounds {
		fmt.Fprintf(out, "%-5d %-7s %-11s %11.3fs %15.3fs\n", i+1, rd.Killed, rd.NewHolder, rd.LeaseSeconds, rd.TakeoverSeconds)
	}
	fmt.Fprintf(out, "\ntakeover median %.3f s, max %.3f s; overlapping provisioner runs %d; machines with more than one instance %d\n",
		f.MedianSeconds, f.MaxSeconds, f.Overlaps, f.Duplicates)
}
