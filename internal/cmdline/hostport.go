package cmdline

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// HostPort says what is wrong with addr as HOST:PORT (nil: nothing): a
// scheme, no port, or a port that is not a number from 1 to 65535.
func HostPort(addr string) error {
	if strings.Contains(addr, "://") {
		return errors.New("no scheme: the address only")
	}
	_, port, err := net.SplitHostPort(addr)
	if _, num := strconv.Atoi(addr); err != nil && num == nil {
		return fmt.Errorf("a port alone: did you mean \"127.0.0.1:%s\"?", addr)
	}
	if err != nil {
		return errors.New("no port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}
