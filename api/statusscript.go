package api

// StatusScript is `muster status --format json` (and yaml), the shape
// scripts rely on: the API's Status without its "provisioner-error" key
// (the table shows that), every key always present, lists never null.
type StatusScript struct {
	Model       string                   `json:"model"`
	Provider    string                   `json:"provider"`
	HarvestMode string                   `json:"harvest-mode"`
	Machines    map[string]MachineStatus `json:"machines"`
	Zones       map[string]ZoneStatus    `json:"zones"`
}

// Script returns st in the shape of StatusScript.
func (st Status) Script() StatusScript {
	out := StatusScript{Model: st.Model, Provider: st.Provider, HarvestMode: st.HarvestMode,
		Machines: st.Machines, Zones: st.Zones}
	if out.Machines == nil {
		out.Machines = map[string]MachineStatus{}
	}
	if out.Zones == nil {
		out.Zones = map[string]ZoneStatus{}
	}
	for id, m := range out.Machines {
		if m.Addresses == nil {
			m.Addresses = []string{}
			out.Machines[id] = m
		}
	}
	return out
}
