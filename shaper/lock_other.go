//go:build !unix

package shaper

import "os"

// lockFile does nothing where flock is not available: the data directory
// is not guarded there.
func lockFile(*os.File) error { return nil }
