package ec2

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/musterhq/muster"
)

// Tag keys used besides the muster.Tag* keys.
const (
	// TagBatch marks the instances of a batch start; its value is the
	// batch's client token.
	TagBatch = "muster-batch"
	// TagSpace names the muster space of a subnet.
	TagSpace = "muster-space"
	// TagName is EC2's display name tag.
	TagName = "Name"
)

// liveStates are the instance states Instances lists: an instance that is
// shutting down or terminated is gone for muster.
var liveStates = []string{"pending", "running", "stopping", "stopped"}

const (
	// defaultPageSize is the MaxResults of DescribeInstances.
	defaultPageSize = 1000
	// filterChunk bounds the values of one filter.
	filterChunk = 200
	// subnetTTL is how long the subnet list is reused to choose a zone's
	// subnet.
	subnetTTL = 5 * time.Minute
	// ownForget is how long after its start an instance missing from
	// listings is still remembered as this provider's (EC2's listings lag
	// by seconds, and show a terminated instance for about an hour).
	ownForget = time.Hour
)

// Provider is a muster.Provider on Amazon EC2 (or the sim's EC2 endpoint)
// for one model of one controller. It is safe for concurrent use.
type Provider struct {
	client     *ec2.Client
	idCert     []byte // Config.IdentityCert: batches enrol only with one
	region     string
	controller string
	model      string
	log        *slog.Logger

	pageSize int32            // DescribeInstances MaxResults; tests lower it
	now      func() time.Time // for the subnet cache

	// Semaphores (capacity 1) so that concurrent starts look each
	// catalogue up once.
	typesSem, imagesSem, subnetsSem, zonesSem chan struct{}

	mu        sync.Mutex
	types     []instanceType            // nil until listed
	images    map[string]image          // by base + "/" + arch
	subnets   []subnet                  // nil until listed
	subnetsAt time.Time                 // when subnets were listed
	zones     []string                  // zone names in the order listed; nil until listed
	own       map[string]time.Time      // instance ids this provider started, and when
	batches   map[string]map[int]launch // reservation id → launch index → launch
	calls     map[string]int            // operations by name, for tests and measures
}

var (
	_ muster.Provider     = (*Provider)(nil)
	_ muster.BatchStarter = (*Provider)(nil)
	_ muster.Networking   = (*Provider)(nil)
)

// Open checks cfg and makes a Provider for a model of a controller. It
// loads the AWS configuration (region, profile, credentials chain) but
// does not call EC2.
func Open(ctx context.Context, cfg Config, controllerUUID, modelUUID string) (*Provider, error) {
	if controllerUUID == "" || modelUUID == "" {
		return nil, muster.Errorf(muster.EInvalid, "ec2 provider: controller and model uuid are required")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithRetryer(newRetryer),
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(cfg.HTTPClient))
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	loopback := isLoopbackEndpoint(cfg.Endpoint)
	if loopback {
		// An instance role is for AWS itself, and asking 169.254.169.254
		// would send traffic off the host for a local endpoint.
		opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, &muster.Error{Code: muster.EInvalid, Err: err,
			Message: "ec2 provider: load AWS configuration: " + oneLine(err.Error())}
	}
	p := &Provider{
		idCert:     cfg.IdentityCert,
		region:     cfg.Region,
		controller: controllerUUID,
		model:      modelUUID,
		log:        cmp.Or(cfg.Logger, slog.Default()).With("provider", "ec2", "region", cfg.Region),
		pageSize:   defaultPageSize,
		now:        time.Now,
		typesSem:   make(chan struct{}, 1),
		imagesSem:  make(chan struct{}, 1),
		subnetsSem: make(chan struct{}, 1),
		zonesSem:   make(chan struct{}, 1),
		images:     map[string]image{},
		own:        map[string]time.Time{},
		batches:    map[string]map[int]launch{},
		calls:      map[string]int{},
	}
	if loopback && cfg.Credentials == nil && cfg.LoopbackCredentials != nil {
		awsCfg.Credentials = aws.NewCredentialsCache(orCredentials{awsCfg.Credentials, cfg.LoopbackCredentials})
	}
	if awsCfg.Credentials != nil {
		awsCfg.Credentials = credentialsMarker{awsCfg.Credentials} // already cached by config
	}
	if awsCfg.HTTPClient == nil { // set by the config only for a custom CA bundle
		awsCfg.HTTPClient = awshttp.NewBuildableClient()
	}
	awsCfg.HTTPClient = ownBodies{awsCfg.HTTPClient}
	p.client = ec2.NewFromConfig(awsCfg, func(o *ec2.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.APIOptions = append(o.APIOptions, p.countCalls)
	})
	return p, nil
}

// newRetryer is the SDK's standard retryer narrowed to what is safe and
// useful to retry at once: connection errors and EC2's InternalError and
// Unavailable. Throttling and capacity errors are returned at once, for
// muster's own rate limiter and zone failover; RunInstances is safe to
// retry because of its ClientToken. The SDK's retry quota is off: muster
// limits its calls itself.
func newRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.Retryables = []retry.IsErrorRetryable{
			retry.NoRetryCanceledError{},
			retry.RetryableError{},
			retry.RetryableConnectionError{},
			retry.RetryableErrorCode{Codes: retryCodes},
		}
		o.RateLimiter = ratelimit.None
	})
}

// ownBodies sends each request with a copy of its body that only the
// transport reads and closes. The SDK closes the body it built once the
// response is in, but net/http may still be finishing the write then;
// the write fails, the transport closes the connection, and reading the
// response fails with "use of closed network connection" (the SDK then
// sends the request again: seen under load against the sim).
type ownBodies struct{ aws.HTTPClient }

func (c ownBodies) Do(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return c.HTTPClient.Do(r)
	}
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(b))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r2.ContentLength = int64(len(b))
	return c.HTTPClient.Do(r2)
}

// isLoopbackEndpoint tells whether endpoint's host is localhost or a
// loopback address.
func isLoopbackEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || endpoint == "" {
		return false
	}
	h := u.Hostname()
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// orCredentials are the first provider's credentials, else the second's.
type orCredentials struct{ first, second aws.CredentialsProvider }

func (o orCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	if o.first != nil {
		if c, err := o.first.Retrieve(ctx); err == nil {
			return c, nil
		}
	}
	return o.second.Retrieve(ctx)
}

// credentialsMarker marks the failures of a credentials provider, so that
// classify tells them from failures of EC2.
type credentialsMarker struct{ aws.CredentialsProvider }

func (m credentialsMarker) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := m.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return c, &credentialsError{err}
	}
	return c, nil
}

// credentialsError is a failure to find credentials in the AWS chain.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "get AWS credentials: " + e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

// countCalls counts operations (not attempts) by name.
func (p *Provider) countCalls(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("musterCountCalls",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			op := awsmiddleware.GetOperationName(ctx)
			p.mu.Lock()
			p.calls[op]++
			p.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

// callCounts returns the operations made so far, by name.
func (p *Provider) callCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.calls))
	for k, v := range p.calls {
		out[k] = v
	}
	return out
}

// ownFilters select this model's instances.
func (p *Provider) ownFilters() []types.Filter {
	return []types.Filter{
		{Name: aws.String("tag:" + muster.TagController), Values: []string{p.controller}},
		{Name: aws.String("tag:" + muster.TagModel), Values: []string{p.model}},
	}
}

// Zones lists the region's availability zones (local and wavelength zones
// left out); a zone is available when its state is "available".
func (p *Provider) Zones(ctx context.Context) ([]muster.Zone, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ec2 DescribeAvailabilityZones: %w", err)
	}
	out, err := p.client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		return nil, classify(err, "DescribeAvailabilityZones", "")
	}
	zones := []muster.Zone{}
	names := []string{}
	for _, z := range out.AvailabilityZones {
		name := aws.ToString(z.ZoneName)
		if name == "" || (z.ZoneType != nil && *z.ZoneType != "availability-zone") || slices.Contains(names, name) {
			continue
		}
		names = append(names, name)
		zones = append(zones, muster.Zone{Name: name, Available: z.State == types.AvailabilityZoneStateAvailable})
	}
	p.mu.Lock()
	p.zones = names
	p.mu.Unlock()
	return zones, nil
}

// zoneNames returns the zone names, listing them when they are not known
// yet or when refresh is set.
func (p *Provider) zoneNames(ctx context.Context, refresh bool) ([]string, error) {
	if err := acquire(ctx, p.zonesSem); err != nil {
		return nil, fmt.Errorf("ec2 DescribeAvailabilityZones: %w", err)
	}
	defer func() { <-p.zonesSem }()
	p.mu.Lock()
	names := p.zones
	p.mu.Unlock()
	if names != nil && !refresh {
		return names, nil
	}
	if _, err := p.Zones(ctx); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.zones, nil
}

// Subnets lists the region's subnets; a subnet's space is its muster-space
// tag.
func (p *Provider) Subnets(ctx context.Context) ([]muster.Subnet, error) {
	subs, err := p.listSubnets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]muster.Subnet, 0, len(subs))
	for _, s := range subs {
		out = append(out, muster.Subnet{ID: s.id, CIDR: s.cidr, Zone: s.zone, Space: s.space})
	}
	return out, nil
}

// DeriveZones returns the zones a start may go to: the zone of a
// "zone=NAME" placement (which must be a zone of the region), intersected
// with the zones of each requested space's subnets. nil means any zone.
// EBS volumes are made with the instance, so they restrict nothing.
func (p *Provider) DeriveZones(ctx context.Context, sp muster.StartParams) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ec2 derive zones: %w", err)
	}
	zone, err := muster.ParsePlacement(sp.Placement)
	if err != nil {
		return nil, zoneIndependent("%v", err)
	}
	var allowed []string // nil = any
	if zone != "" {
		if err := p.checkZone(ctx, zone); err != nil {
			return nil, err
		}
		allowed = []string{zone}
	}
	for i, m := range sp.SubnetsToZones {
		var zs []string
		for _, zones := range m {
			for _, z := range zones {
				if !slices.Contains(zs, z) {
					zs = append(zs, z)
				}
			}
		}
		if allowed == nil {
			allowed = zs
		} else {
			allowed = slices.DeleteFunc(allowed, func(z string) bool { return !slices.Contains(zs, z) })
		}
		if len(allowed) == 0 {
			if zone != "" {
				return nil, zoneIndependent("placement zone %s has no subnet of requested space %d", zone, i+1)
			}
			return nil, zoneIndependent("no zone has a subnet of every requested space")
		}
	}
	slices.Sort(allowed)
	return allowed, nil
}

// checkZone fails zone-independently unless zone is a zone of the region.
func (p *Provider) checkZone(ctx context.Context, zone string) error {
	names, err := p.zoneNames(ctx, false)
	if err != nil {
		return err
	}
	if slices.Contains(names, zone) {
		return nil
	}
	if names, err = p.zoneNames(ctx, true); err != nil {
		return err
	}
	if !slices.Contains(names, zone) {
		return zoneIndependent("placement zone %q is not a zone of region %s (zones: %s)", zone, p.region, strings.Join(names, ", "))
	}
	return nil
}

// Instances lists this model's live instances (pending, running, stopping,
// stopped) by their controller and model tags, following NextToken. An
// instance of a batch without a machine or launch token tag has them read
// from its reservation's user data (once per reservation, then cached) at
// its launch index, added to its Tags, and tagged (the batch's tagging
// after its launch did not happen or failed).
func (p *Provider) Instances(ctx context.Context) ([]muster.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ec2 DescribeInstances: %w", err)
	}
	filters := append(p.ownFilters(), types.Filter{Name: aws.String("instance-state-name"), Values: liveStates})
	type pending struct {
		pos   int // in out
		index int // launch index
	}
	var (
		out     []muster.Instance
		unknown = map[string][]pending{} // reservation → batch instances to resolve
		resIDs  = map[string][]string{}  // reservation → its batch instance ids
		seenRes = map[string]bool{}
		seen    = map[string]bool{}
	)
	err := p.describeOwn(ctx, filters, func(r types.Reservation) {
		rid := aws.ToString(r.ReservationId)
		seenRes[rid] = true
		for _, inst := range r.Instances {
			in := p.instance(inst)
			if !p.isOwn(in.Tags) || !slices.Contains(liveStates, in.State) {
				continue // a filter the endpoint ignored
			}
			seen[in.ID] = true
			if in.MachineID == "" && in.Tags[TagBatch] != "" && inst.AmiLaunchIndex != nil {
				unknown[rid] = append(unknown[rid], pending{len(out), int(*inst.AmiLaunchIndex)})
				resIDs[rid] = append(resIDs[rid], in.ID)
			}
			out = append(out, in)
		}
	})
	if err != nil {
		return nil, err
	}
	resolved, err := p.resolveBatches(ctx, resIDs)
	if err != nil {
		return nil, err
	}
	var untagged []namedInstance
	for rid, ps := range unknown {
		for _, x := range ps {
			l, ok := resolved[rid][x.index]
			if !ok {
				continue
			}
			in := &out[x.pos]
			in.MachineID, in.LaunchToken = l.Machine, l.LaunchToken
			in.Tags[muster.TagMachine], in.Tags[muster.TagLaunchToken] = l.Machine, l.LaunchToken
			n := namedInstance{id: in.ID, launch: l}
			if strings.HasPrefix(in.Tags[TagName], "muster-"+short(p.model, 8)+"-machines ") {
				n.name = p.machineName(l.Machine) // the batch's Name, not one given
			}
			untagged = append(untagged, n)
		}
	}
	// A crash (or a failed CreateTags) came between the batch's launch
	// and its tagging: the tags are completed now.
	p.tagMachines(ctx, untagged)
	p.mu.Lock()
	for rid := range p.batches {
		if !seenRes[rid] {
			delete(p.batches, rid)
		}
	}
	// An instance gone behind muster's back is forgotten once it is
	// missing from a listing long after its start: a young one may be
	// missing only because listings lag.
	now := p.now()
	for id, at := range p.own {
		if !seen[id] && now.Sub(at) > ownForget {
			delete(p.own, id)
		}
	}
	p.mu.Unlock()
	return out, nil
}

// isOwn reports whether tags mark an instance of this model.
func (p *Provider) isOwn(tags map[string]string) bool {
	return tags[muster.TagController] == p.controller && tags[muster.TagModel] == p.model
}

// instance converts an EC2 instance.
func (p *Provider) instance(inst types.Instance) muster.Instance {
	tags := map[string]string{}
	for _, t := range inst.Tags {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	in := muster.Instance{
		ID:          aws.ToString(inst.InstanceId),
		Tags:        tags,
		MachineID:   tags[muster.TagMachine],
		LaunchToken: tags[muster.TagLaunchToken],
		Created:     aws.ToTime(inst.LaunchTime),
	}
	if inst.Placement != nil {
		in.Zone = aws.ToString(inst.Placement.AvailabilityZone)
	}
	if inst.State != nil {
		in.State = string(inst.State.Name)
	}
	return in
}

// resolveParallel bounds the DescribeInstanceAttribute calls one listing
// makes at once (a restarted controller resolves every batch reservation).
const resolveParallel = 8

// resolveBatches returns the launches of the batch reservations of
// resIDs (reservation → its batch instance ids), a few at a time. What was
// resolved stays cached even when another reservation fails.
func (p *Provider) resolveBatches(ctx context.Context, resIDs map[string][]string) (map[string]map[int]launch, error) {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		out      = map[string]map[int]launch{}
		sem      = make(chan struct{}, resolveParallel)
	)
	for rid, ids := range resIDs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ls, err := p.batchLaunches(ctx, rid, ids)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			out[rid] = ls
		}()
	}
	wg.Wait()
	return out, firstErr
}

// batchLaunches returns the launches of a batch reservation, from the
// cache or from the user data of one of its instances (ids).
func (p *Provider) batchLaunches(ctx context.Context, rid string, ids []string) (map[int]launch, error) {
	p.mu.Lock()
	ls, ok := p.batches[rid]
	p.mu.Unlock()
	if ok {
		return ls, nil
	}
	for _, id := range ids {
		out, err := p.client.DescribeInstanceAttribute(ctx, describeUserData(id))
		if apiCode(err) == codeInstanceNotFound {
			continue // ended meanwhile; try another of the reservation
		}
		if err != nil {
			return nil, classify(err, "DescribeInstanceAttribute", "")
		}
		data, err := decodeUserData(out.UserData)
		if err != nil {
			p.log.Warn("batch user data is not base64", "reservation", rid, "instance", id, "err", err)
		}
		ls, err = parseLaunches(data)
		if err != nil {
			p.log.Warn("batch instances without machine", "reservation", rid, "instance", id, "err", err)
			ls = map[int]launch{}
		}
		p.mu.Lock()
		p.batches[rid] = ls
		p.mu.Unlock()
		return ls, nil
	}
	return nil, nil
}

func describeUserData(id string) *ec2.DescribeInstanceAttributeInput {
	return &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: types.InstanceAttributeNameUserData}
}

// decodeUserData decodes the userData attribute of an instance; nil or
// empty is no user data.
func decodeUserData(v *types.AttributeValue) ([]byte, error) {
	if v == nil || aws.ToString(v.Value) == "" {
		return nil, nil
	}
	return base64.StdEncoding.DecodeString(aws.ToString(v.Value))
}

// StopInstances terminates those of ids that are this model's instances:
// the ones this provider started, and the others only once DescribeInstances
// with their ids and this model's tags confirms them (H7). Unknown,
// foreign and malformed ids are left alone; no ids is a no-op.
func (p *Provider) StopInstances(ctx context.Context, ids ...string) error {
	ids = uniq(ids)
	if len(ids) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ec2 TerminateInstances: %w", err)
	}
	var mine, check []string
	p.mu.Lock()
	for _, id := range ids {
		switch {
		case !p.own[id].IsZero():
			mine = append(mine, id)
		case plausibleID(id):
			check = append(check, id)
		}
	}
	p.mu.Unlock()
	for len(check) > 0 {
		chunk := check[:min(filterChunk, len(check))]
		check = check[len(chunk):]
		confirmed, err := p.confirmOwn(ctx, chunk)
		if err != nil {
			return err
		}
		mine = append(mine, confirmed...)
	}
	if err := p.terminate(ctx, mine); err != nil {
		return err
	}
	p.mu.Lock()
	for _, id := range mine {
		delete(p.own, id)
	}
	p.mu.Unlock()
	return nil
}

// confirmOwn returns those of ids that are this model's and not yet
// terminated.
func (p *Provider) confirmOwn(ctx context.Context, ids []string) ([]string, error) {
	filters := append(p.ownFilters(),
		types.Filter{Name: aws.String("instance-id"), Values: ids},
		types.Filter{Name: aws.String("instance-state-name"), Values: append(slices.Clone(liveStates), "shutting-down")})
	var out []string
	err := p.describeOwn(ctx, filters, func(r types.Reservation) {
		for _, inst := range r.Instances {
			in := p.instance(inst)
			if p.isOwn(in.Tags) && slices.Contains(ids, in.ID) && in.State != "terminated" && !slices.Contains(out, in.ID) {
				out = append(out, in.ID)
			}
		}
	})
	return out, err
}

// describeOwn calls visit for every reservation DescribeInstances lists
// with filters, page by page (the SDK's paginator follows NextToken and
// stops on a repeated one).
func (p *Provider) describeOwn(ctx context.Context, filters []types.Filter, visit func(types.Reservation)) error {
	pages := ec2.NewDescribeInstancesPaginator(p.client, &ec2.DescribeInstancesInput{Filters: filters, MaxResults: aws.Int32(p.pageSize)})
	for pages.HasMorePages() {
		res, err := pages.NextPage(ctx)
		if err != nil {
			return classify(err, "DescribeInstances", "")
		}
		for _, r := range res.Reservations {
			visit(r)
		}
	}
	return nil
}

// terminate terminates ids, dropping the ids EC2 says do not exist or are
// malformed and trying again without them.
func (p *Provider) terminate(ctx context.Context, ids []string) error {
	const chunk = 1000
	for len(ids) > 0 {
		batch := slices.Clone(ids[:min(chunk, len(ids))])
		ids = ids[len(batch):]
		for len(batch) > 0 {
			_, err := p.client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: batch})
			if err == nil {
				p.log.Info("instances terminated", "instances", batch)
				break
			}
			code := apiCode(err)
			if code != codeInstanceNotFound && code != codeInstanceMalformed {
				return classify(err, "TerminateInstances", "")
			}
			gone := idsInMessage(apiMessage(err))
			n := len(batch)
			batch = slices.DeleteFunc(batch, func(id string) bool { return slices.Contains(gone, id) })
			if len(batch) == n {
				return classify(err, "TerminateInstances", "")
			}
		}
	}
	return nil
}

// plausibleID reports whether id could be an EC2 instance id worth asking
// about: "i-" and then letters and digits only.
func plausibleID(id string) bool {
	if len(id) < 3 || len(id) > 64 || !strings.HasPrefix(id, "i-") {
		return false
	}
	for _, r := range id[2:] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-') {
			return false
		}
	}
	return true
}

func uniq(ids []string) []string {
	var out []string
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// acquire takes a capacity-1 semaphore or gives up when ctx ends.
func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
