package client

// defaultCodec returns the codec used for broker connections.
func defaultCodec() codec { return wireCodec{} }
