package nemesis

import "context"

// LockService holds server name as a fault on it does, for tests of
// what waits behind one.
func (e *Env) LockService(ctx context.Context, name string) (func(), error) {
	return e.lockService(ctx, name)
}
