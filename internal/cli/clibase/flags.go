package clibase

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize reads 512M, 2G, 1.5GiB, 1048576 as bytes ("" is 0).
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	u := strings.ToUpper(strings.TrimSpace(s))
	u = strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B")
	mult := int64(1)
	switch {
	case strings.HasSuffix(u, "K"):
		mult, u = 1<<10, strings.TrimSuffix(u, "K")
	case strings.HasSuffix(u, "M"):
		mult, u = 1<<20, strings.TrimSuffix(u, "M")
	case strings.HasSuffix(u, "G"):
		mult, u = 1<<30, strings.TrimSuffix(u, "G")
	case strings.HasSuffix(u, "T"):
		mult, u = 1<<40, strings.TrimSuffix(u, "T")
	}
	f, err := strconv.ParseFloat(u, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("%q is not a size: use a number with K, M, G or T, such as 512M", s)
	}
	return int64(f * float64(mult)), nil
}

// MultiFlag collects a repeatable flag.
type MultiFlag []string

func (m *MultiFlag) String() string     { return strings.Join(*m, ",") }
func (m *MultiFlag) Set(v string) error { *m = append(*m, v); return nil }
