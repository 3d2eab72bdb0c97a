package cmdline

import (
	"runtime/debug"
)

// Version is the version a command says with --version: the module's
// version and the commit it was built from (its first 12 digits, with
// "+dirty" for uncommitted changes), as the Go toolchain stamps them in
// the binary; "(devel)" when neither is known.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return versionOf(info)
}

func versionOf(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " commit " + rev + dirty
	}
	return v + " " + info.GoVersion
}
