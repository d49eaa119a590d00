package sqlstore

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/musterhq/muster"
)

// instanceCacheMax bounds the instance cache; when full it starts over.
const instanceCacheMax = 1 << 17

// instanceCache remembers the decoded instance column by its text: status
// reads of a big model decode the same unchanged instances again and
// again, and decoding them was most of a machine read's time. A pure
// memo of json.Unmarshal, shared by every store; each caller gets its own
// copy, slices included.
var instanceCache = struct {
	sync.Mutex
	m map[string]*muster.InstanceInfo
}{m: map[string]*muster.InstanceInfo{}}

// decodeInstance decodes an instance column.
func decodeInstance(text string) (*muster.InstanceInfo, error) {
	instanceCache.Lock()
	cached := instanceCache.m[text]
	instanceCache.Unlock()
	if cached == nil {
		cached = new(muster.InstanceInfo)
		if err := json.Unmarshal([]byte(text), cached); err != nil {
			return nil, err
		}
		instanceCache.Lock()
		if len(instanceCache.m) >= instanceCacheMax {
			clear(instanceCache.m)
		}
		instanceCache.m[text] = cached
		instanceCache.Unlock()
	}
	out := *cached
	out.Addresses = slices.Clone(cached.Addresses)
	out.Volumes = slices.Clone(cached.Volumes)
	out.Attachments = slices.Clone(cached.Attachments)
	return &out, nil
}
