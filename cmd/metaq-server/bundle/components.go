package bundle

// builtinComponents returns the components every bundle of this mode runs,
// in start order. This is the place where the async-slave receiver
// (georeplicator, ModeSlave), the config-sync agent, topology and the
// dashboard are added as they land, each behind its own config section:
//
//	if b.opts.Mode == ModeSlave { comps = append(comps, newSlaveReceiver(b)) }
//	if b.Config().NATS ... { comps = append(comps, newConfigSyncAgent(b)) }
func builtinComponents(b *Bundle) []Component {
	var comps []Component
	return comps
}
